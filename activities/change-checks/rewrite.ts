/**
 * A `rewrite` step's preflight: the shadow is built in a transaction that is rolled back, so
 * every alter, expression and carried object is tried on the real catalog and nothing stays.
 */
import { RewriteStep } from '../../src/core/change-plan';
import { rewriteProblems } from '../../src/db/rewrite-data';
import { StepCheck } from './common';

export const checkRewrite: StepCheck<RewriteStep> = async (db, _plan, step, decision, _declared, changeId) => {
  const { problems } = await rewriteProblems(db, changeId, step, false);
  decision.note = 'shadow copy, capture, sync, validation, swap';
  return problems.map((p) => (p.startsWith('.') ? `.rewrite${p}` : `.rewrite.table${p}`));
};
