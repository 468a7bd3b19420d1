/**
 * A change step kind as an operation (one module per kind, the way pgroll keeps one file per
 * operation): how it runs, how a completed one is undone when the plan rolls back, what a failed
 * one may have left, and whether its undo is registered before it runs (a step whose completion
 * can be lost after it changed something: an index build, a backfill) or once it succeeded.
 * Preflight's judgement of each kind is an activity (activities/change-checks/), since workflow
 * code cannot read a database.
 */
import { ChangeStep } from '../../../src/core/change-plan';
import { StepKind } from '../../../src/core/change-limits';
import type { StepOperation } from '../context';
import { backfillOperation } from './backfill';
import { indexOperation } from './index-build';
import { rewriteOperation } from './rewrite';
import { sqlOperation } from './sql';
import { validateOperation } from './validate';

export type { StepOperation } from '../context';

type Operations = { [K in StepKind]: StepOperation<Extract<ChangeStep, { kind: K }>> };

const OPERATIONS: Operations = {
  sql: sqlOperation,
  backfill: backfillOperation,
  index: indexOperation,
  validate: validateOperation,
  rewrite: rewriteOperation,
};

/** The operation of a step's kind. */
export function operationOf(step: ChangeStep): StepOperation {
  return OPERATIONS[step.kind] as StepOperation;
}
