/**
 * A backfill step, driven as slices (activities of about ten seconds, each a run of committed
 * batches) so pause, throttle and cancel act between them; a slice that finds the database too
 * busy (replica lag, active sessions) returns at once and the next one waits. With `until: all`
 * passes repeat from the first key until one updates nothing.
 */
import { ApplicationFailure, condition, sleep } from '@temporalio/workflow';
import { BackfillStep } from '../../src/core/change-plan';
import type { BackfillPlace, ChangeContext } from './context';

export type { BackfillPlace } from './context';

/** How long a busy database is left alone before the next look. */
const LOAD_WAIT_MS = 5_000;
/** until: all gives up after this many passes that each still updated rows. */
export const MAX_PASSES = 20;


export async function runBackfill(ctx: ChangeContext, step: BackfillStep, from: BackfillPlace = { pass: 0, updatedBefore: 0 }): Promise<void> {
  const { tracker, plan } = ctx;
  const status = tracker.steps[step.index];
  const target = await ctx.acts.quick.prepareBackfill({ database: plan.database, backfill: { table: step.table } });
  status.progress = { done: status.progress?.done ?? 0, total: target.rowsEstimated, unit: 'rows' };
  let updatedBefore = from.updatedBefore;
  for (let pass = from.pass; ; pass += 1) {
    if (pass >= MAX_PASSES) {
      throw ApplicationFailure.nonRetryable(
        `until: all made ${MAX_PASSES} passes and each still updated rows: the set expressions leave some rows matching where, or writers keep adding them`,
        'BackfillNotConverging',
      );
    }
    status.passes = pass + 1;
    let passUpdated = 0;
    for (;;) {
      if (tracker.paused) {
        tracker.setWaiting('paused (ferry resume continues)');
        await condition(() => !tracker.paused);
        tracker.setWaiting(undefined);
      }
      const r = await ctx.acts.slices.backfillSlice({
        changeId: ctx.id,
        runId: ctx.runId,
        step: step.index,
        pass,
        database: plan.database,
        backfill: { table: step.table, set: step.set, where: step.where, batchRows: step.batchRows },
        fence: ctx.nextFence(),
        sliceMs: ctx.timings.backfillSliceMs,
        rowsPerSecond: tracker.throttle.rowsPerSecond,
        batchRows: tracker.throttle.batchRows,
        maxReplicaLagMs: plan.throttle.maxReplicaLagMs,
        maxActiveSessions: plan.throttle.maxActiveSessions,
      });
      passUpdated = r.passUpdated;
      status.progress = { done: r.passScanned, total: Math.max(target.rowsEstimated, r.passScanned), unit: 'rows' };
      status.rowsUpdated = updatedBefore + r.passUpdated;
      if (r.updated > 0 || r.done) tracker.event('BackfillProgress', step.index, { pass, rowsScanned: r.passScanned, rowsUpdated: r.passUpdated, done: r.done });
      if (r.waiting) {
        tracker.setWaiting(r.waiting);
        await sleep(LOAD_WAIT_MS);
        await ctx.checkpoint(step, { pass, updatedBefore });
        continue;
      }
      tracker.setWaiting(undefined);
      if (r.done) break;
      // The pass goes on from its checkpoint, in this run or the next.
      await ctx.checkpoint(step, { pass, updatedBefore });
    }
    updatedBefore += passUpdated;
    if (step.until !== 'all' || passUpdated === 0) return;
  }
}
