/**
 * A `backfill` step (workflows/change/backfill.ts): keyset batches in slices, resumable. Its
 * undo — a warning, as updated rows keep their values — is registered before it runs.
 */
import { BackfillStep } from '../../../src/core/change-plan';
import { BackfillPlace, runBackfill } from '../backfill';
import { StepDecision, StepRun, UndoAction, StepOperation } from '../context';

export const backfillOperation: StepOperation<BackfillStep> = {
  undoRegistered: 'before',
  run: (run: StepRun, step: BackfillStep, _decision: StepDecision, place?: BackfillPlace) => runBackfill(run.context(), step, place),
  undo: (): UndoAction => ({ warning: ' (backfill): updated rows keep their new values' }),
};
