/**
 * An `index` step: CREATE INDEX CONCURRENTLY (or REINDEX … CONCURRENTLY with rebuild), an
 * INVALID leftover of an earlier attempt dropped first. Its undo is registered before the build
 * (a build whose completion is lost is still undone) and drops only the index the step builds.
 */
import { IndexStep } from '../../../src/core/change-plan';
import { StepDecision, StepRun, UndoAction, StepOperation } from '../context';

export const indexOperation: StepOperation<IndexStep> = {
  undoRegistered: 'before',

  async run(run: StepRun, step: IndexStep): Promise<void> {
    const built = await run.acts.forStep(step.timeoutMs).buildChangeIndex({ changeId: run.ref.changeId, database: run.ref.database, index: step, statementTimeoutMs: step.timeoutMs });
    if (built.droppedInvalid.length) run.tracker.steps[step.index].note = `dropped INVALID ${built.droppedInvalid.join(', ')} left by an earlier attempt, then built it`;
  },

  undo(run: StepRun, step: IndexStep, decision: StepDecision): UndoAction | undefined {
    if (step.rebuild || decision.indexExisted === true) return undefined;
    return {
      run: async () => {
        const index = { columns: step.columns, unique: step.unique, using: step.using, where: step.where };
        const { kept } = await run.acts.forStep(step.timeoutMs).dropChangeIndex({ database: run.ref.database, table: step.table, name: step.name, onlyInvalid: false, index });
        // Somebody else's index of the step's name: not the step's to drop.
        if (kept) run.tracker.warnings.push(`step ${step.index + 1} (index): kept ${step.name}, which is not the index the step builds (${kept})`);
      },
    };
  },

  /** An INVALID index the failed build left (a rebuild's leftovers are the activity's to drop). */
  async cleanUpAfterFailure(run: StepRun, step: IndexStep): Promise<void> {
    if (!step.rebuild) await run.acts.quick.dropChangeIndex({ database: run.ref.database, table: step.table, name: step.name, onlyInvalid: true });
  },
};
