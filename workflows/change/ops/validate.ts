/** A `validate` step: VALIDATE CONSTRAINT under a short lock_timeout, retried while busy. Nothing to undo. */
import { quoteIdent, quoteQualified } from '../../../src/core/identifiers';
import { ValidateStep } from '../../../src/core/change-plan';
import { StepRun, StepOperation } from '../context';

export const validateOperation: StepOperation<ValidateStep> = {
  undoRegistered: 'after',

  async run(run: StepRun, step: ValidateStep): Promise<void> {
    // Built from names only (quoted by PostgreSQL's rules): no plan text in this statement.
    const sql = `ALTER TABLE ${quoteQualified(step.table)} VALIDATE CONSTRAINT ${quoteIdent(step.constraint)}`;
    await run.whileLockBusy(step, 10 * 60_000, () =>
      run.acts.forStep(step.timeoutMs).runChangeSql({ ...run.ref, step: step.index, sql, direction: 'up', lockTimeoutMs: 2_000, statementTimeoutMs: step.timeoutMs }),
    );
  },

  undo: () => undefined,
};
