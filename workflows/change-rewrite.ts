/**
 * A rewrite step (docs/architecture.md §10, "Rewrite"): shadow → capture on the original →
 * copy through the expressions → the shadow's foreign keys validated → sync → validation →
 * approval → swap (retried while its lock is busy) → the referencing foreign keys validated,
 * capture removed → the old table kept for keepOld by a helper workflow of its own
 * (workflows/rewrite-retire.ts: `ferry revert` within it, then the drop). Until
 * the swap commits, any failure or cancel undoes what was built (capture, shadow) and leaves the
 * original as it was.
 */
import { ApplicationFailure, CancellationScope, condition, ParentClosePolicy, sleep, startChild } from '@temporalio/workflow';
import type { SwapResult } from '../activities/rewrite-swap';
import { rewriteCaptureId, RewriteStep } from '../src/core/change-plan';
import { FAILURE } from '../src/core/failure-types';
import { innermostApplicationFailure, rootMessage } from '../src/core/failures';
import { REWRITE_RETIRE_WORKFLOW, workflowIds } from '../src/core/names';
import type { ChangeContext } from './change';
import { changeActivities, lockBackoffMs } from './change-proxies';

/** A sync round leaves at most this many logged rows before validation and the swap. */
const CAUGHT_UP_ROWS = 2_000;
const COPY_BATCH_ROWS = 5_000;

export async function runRewrite(ctx: ChangeContext, step: RewriteStep): Promise<void> {
  const { tracker, plan } = ctx;
  const database = plan.database;
  const acts = changeActivities.forStep(step.timeoutMs);
  const quick = changeActivities.quick;
  const ref = { changeId: ctx.id, database, step: step.index, table: step.table };
  const captureId = rewriteCaptureId(ctx.id, step.index);
  const note = (text: string) => {
    tracker.steps[step.index].note = text;
    tracker.publish();
  };
  const undo: { what: string; run: () => Promise<unknown> }[] = [];
  let swap: SwapResult;
  try {
    // Each undo is pushed before its step: a step that commits and loses its completion is still undone.
    undo.push({ what: 'drop the shadow', run: () => quick.dropRewriteShadow(ref) });
    note('building the shadow table');
    const prepared = await acts.prepareRewrite({ changeId: ctx.id, database, step });
    undo.push({ what: 'remove capture', run: () => quick.releaseSource({ migrationId: captureId, source: database, freeze: 'remove' }) });
    await acts.installCapture({ migrationId: captureId, source: database, tables: [{ index: 0, source: step.table, keyColumns: prepared.key.columns }] });
    const data = { ...ref, mapping: prepared.mapping, key: prepared.key };

    note('copying');
    const copied = await acts.copyRewrite({ ...data, batchRows: COPY_BATCH_ROWS, rowsPerSecond: tracker.throttle.rowsPerSecond });
    tracker.progress(step.index, { done: copied.rows, total: copied.rows, unit: 'rows' });
    if (prepared.foreignKeys.length) await acts.validateShadowForeignKeys({ ...ref, table: prepared.shadow, foreignKeys: prepared.foreignKeys });

    note('catching up');
    await catchUp(data);
    note('validating');
    const valid = await acts.validateRewrite(data);
    note(`validated ${valid.rows} rows (count and checksum)`);

    if (step.approval === 'manual') {
      tracker.setWaiting(`step ${step.index + 1}: rewrite of ${step.table.schema}.${step.table.name} awaiting approval (ferry approve ${ctx.id})`);
      // The sync keeps the log short meanwhile; once a minute, so that a wait of days stays far
      // below Temporal's history limit (about ten events a round).
      while (!ctx.approved()) {
        await quick.syncRewrite({ ...data, maxRows: 1_000_000 });
        await condition(ctx.approved, '1 minute');
      }
      tracker.setWaiting(undefined);
      await catchUp(data);
    }
    note('swapping');
    swap = await swapWithRetries(data);
  } catch (err) {
    await CancellationScope.nonCancellable(async () => {
      for (const u of [...undo].reverse()) {
        try {
          await u.run();
        } catch (undoErr) {
          tracker.warnings.push(`step ${step.index + 1} (rewrite): could not ${u.what}: ${rootMessage(undoErr)}`);
        }
      }
    });
    throw err;
  }

  // Past the swap: the new table is in place; what follows only tidies up.
  tracker.event('RewriteSwapped', step.index, { lockedMs: swap.lockedMs, drained: swap.drained, views: swap.views, foreignKeys: swap.foreignKeys.length });
  note(`swapped (writers held ${swap.lockedMs} ms); old table kept ${Math.round(step.keepOldMs / 60_000)} min`);
  await CancellationScope.nonCancellable(async () => {
    try {
      if (swap.foreignKeys.length) await acts.validateReferencingForeignKeys({ database, foreignKeys: swap.foreignKeys });
    } catch (err) {
      tracker.warnings.push(`step ${step.index + 1} (rewrite): a foreign key re-added NOT VALID could not be validated: ${rootMessage(err)}`);
    }
    const released = await quick.releaseSource({ migrationId: captureId, source: database, freeze: 'remove' });
    if (released.pending.length) tracker.warnings.push(`step ${step.index + 1} (rewrite): left for later: ${released.pending.join(', ')}`);
    await startChild(REWRITE_RETIRE_WORKFLOW, {
      workflowId: workflowIds.retire(ctx.id, step.index),
      args: [{ changeId: ctx.id, database, step: step.index, table: step.table, keepOldMs: step.keepOldMs }],
      parentClosePolicy: ParentClosePolicy.ABANDON,
    });
  });

  async function catchUp(data: Parameters<typeof acts.syncRewrite>[0] extends infer T ? Omit<T, 'maxRows'> : never): Promise<void> {
    for (;;) {
      const { left } = await acts.syncRewrite({ ...data, maxRows: 200_000 });
      if (left <= CAUGHT_UP_ROWS) return;
    }
  }

  /** The swap, tried again after a backoff (syncing meanwhile) while its lock is busy, up to maxWait. */
  async function swapWithRetries(data: Parameters<typeof acts.swapRewrite>[0] extends infer T ? Omit<T, 'lockTimeoutMs'> : never): Promise<SwapResult> {
    const started = Date.now();
    for (let n = 1; ; n += 1) {
      tracker.steps[step.index].attempts = n;
      try {
        // Once begun, the swap runs to its commit or rollback: a cancel waits for it.
        return await CancellationScope.nonCancellable(() => acts.swapRewrite({ ...data, lockTimeoutMs: step.lockTimeoutMs }));
      } catch (err) {
        if (innermostApplicationFailure(err)?.type !== FAILURE.LockBusy) throw err;
        const waited = Date.now() - started;
        if (waited >= step.maxWaitMs) {
          throw ApplicationFailure.create({
            message: `step ${step.index + 1}: the swap's lock stayed busy for ${Math.round(waited / 1000)}s over ${n} attempts (maxWait ${step.maxWaitMs / 1000}s)`,
            type: FAILURE.LockWaitExceeded,
            nonRetryable: true,
            cause: err instanceof Error ? err : undefined,
          });
        }
        tracker.setWaiting(`step ${step.index + 1}: swap lock busy, attempt ${n}`);
        await sleep(Math.min(lockBackoffMs(n, Math.random()), step.maxWaitMs - waited));
        await catchUp(data);
        tracker.setWaiting(undefined);
      }
    }
  }
}
