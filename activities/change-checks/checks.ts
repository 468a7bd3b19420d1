/** Each step kind's preflight (one module per kind, as the workflow's step operations are). */
import { ChangeStep } from '../../src/core/change-plan';
import { StepKind } from '../../src/core/change-limits';
import { checkBackfill } from './backfill';
import { StepCheck } from './common';
import { checkIndex } from './index-build';
import { checkRewrite } from './rewrite';
import { checkSqlStep } from './sql';
import { checkValidate } from './validate';

type Checks = { [K in StepKind]: StepCheck<Extract<ChangeStep, { kind: K }>> };

const CHECKS: Checks = {
  sql: checkSqlStep,
  backfill: checkBackfill,
  index: checkIndex,
  validate: checkValidate,
  rewrite: checkRewrite,
};

/** The check of a step's kind. */
export function checkOf(step: ChangeStep): StepCheck<ChangeStep> {
  return CHECKS[step.kind] as StepCheck<ChangeStep>;
}
