/**
 * A `rewrite` step (workflows/change/rewrite.ts): before its swap it undoes itself; once swapped
 * a plan rollback does not swap back (`ferry revert` is the way back, within keepOld).
 */
import { RewriteStep } from '../../../src/core/change-plan';
import { runRewrite } from '../rewrite';
import { StepRun, UndoAction, StepOperation } from '../context';

export const rewriteOperation: StepOperation<RewriteStep> = {
  undoRegistered: 'after',
  run: (run: StepRun, step: RewriteStep) => runRewrite(run.context(), step),
  undo: (): UndoAction => ({ warning: ' (rewrite): the new table stays; the old one is kept for keepOld' }),
};
