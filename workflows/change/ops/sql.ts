/**
 * A `sql` step: one statement in one transaction under a short lock_timeout, retried while the
 * lock is busy; SET NOT NULL in its safe form when preflight decided so. Its undo is its `down:`
 * (a SET NOT NULL there in the safe form too), registered once the statement committed.
 */
import { SqlStep } from '../../../src/core/change-plan';
import { rootMessage } from '../../../src/core/failures';
import { StepDecision, StepRun, UndoAction, StepOperation } from '../context';
import { flags } from '../../patches';

/**
 * The statement (or down:) runs under the step's statementTimeout (1 min unless it says
 * otherwise). Executions begun before ran it under the step's whole timeout.
 */
function statementTimeout(step: SqlStep): number {
  return flags.sqlStatementTimeout ? step.statementTimeoutMs : step.timeoutMs;
}

export const sqlOperation: StepOperation<SqlStep> = {
  undoRegistered: 'after',

  async run(run: StepRun, step: SqlStep, decision: StepDecision): Promise<void> {
    const ref = { ...run.ref, step: step.index };
    const acts = run.acts.forStep(step.timeoutMs);
    if (decision.action === 'setNotNull' && decision.setNotNull) {
      const { table, column } = decision.setNotNull;
      await run.whileLockBusy(step, step.maxWaitMs, () => acts.setNotNullSafely({ ...ref, table, column, lockTimeoutMs: step.lockTimeoutMs, statementTimeoutMs: step.timeoutMs }));
    } else {
      await run.whileLockBusy(step, step.maxWaitMs, () =>
        acts.runChangeSql({ ...ref, sql: step.sql, direction: 'up', lockTimeoutMs: step.lockTimeoutMs, statementTimeoutMs: statementTimeout(step) }),
      );
    }
  },

  undo(run: StepRun, step: SqlStep, decision: StepDecision): UndoAction {
    const down = step.down;
    if (down === undefined) return { warning: ' has no down: it was not undone' };
    const ref = { ...run.ref, step: step.index };
    const safe = decision.downAction === 'setNotNull' ? decision.downSetNotNull : undefined;
    const undo = () =>
      run.whileLockBusy(step, step.maxWaitMs, () =>
        safe && flags.safeDownSetNotNull
          ? run.acts.forStep(step.timeoutMs).setNotNullSafely({ ...ref, ...safe, direction: 'down', lockTimeoutMs: step.lockTimeoutMs, statementTimeoutMs: step.timeoutMs })
          : run.acts.forStep(step.timeoutMs).runChangeSql({ ...ref, sql: down, direction: 'down', lockTimeoutMs: step.lockTimeoutMs, statementTimeoutMs: statementTimeout(step) }),
      );
    return {
      run: async () => {
        try {
          await undo();
        } catch (err) {
          // The safe form's helper CHECK, left by a VALIDATE that failed (a NULL written since),
          // goes as a step's does. (Executions begun before left it.)
          if (safe && flags.cleanFailedSafeDown) {
            await run.acts.quick
              .dropNotNullCheck({ database: run.ref.database, ...safe, lockTimeoutMs: step.lockTimeoutMs })
              .catch((cleanup: unknown) => run.tracker.warnings.push(`step ${step.index + 1}: its down:'s helper CHECK could not be dropped: ${rootMessage(cleanup)}`));
          }
          throw err;
        }
      },
    };
  },

  /** The safe SET NOT NULL's helper CHECK, if the step failed after adding it. */
  async cleanUpAfterFailure(run: StepRun, step: SqlStep, decision: StepDecision): Promise<void> {
    if (decision.action === 'setNotNull' && decision.setNotNull) {
      await run.acts.quick.dropNotNullCheck({ database: run.ref.database, ...decision.setNotNull, lockTimeoutMs: step.lockTimeoutMs });
    }
  },
};
