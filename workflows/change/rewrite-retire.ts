/**
 * rewriteRetireWorkflow, `<change id>/retire-<step index>`: a rewrite's old table kept for
 * keepOld (a durable timer) while capture on the new table logs every write made since the swap.
 * The `revert` signal (`ferry revert`) swaps back within that window: the logged writes carried
 * to the old table through the casts back, until few are left; the old table checked against the
 * new one (count and checksum of the shared columns); then the swap back, as the swap (both
 * tables locked under a short lock_timeout, tried again after a backoff while busy; the rest of
 * the log drained; names, indexes, sequences, views and foreign keys moved). The new table stays
 * aside for another keepOld. A revert that fails leaves the new table in place and may be asked
 * again. When keepOld passes without one, capture goes and the old table is dropped.
 */
import { condition, setHandler, sleep } from '@temporalio/workflow';
import { revertCaptureId } from '../../src/core/change-plan';
import { rootMessage } from '../../src/core/failures';
import { QualifiedName } from '../../src/core/identifiers';
import { Audit, checkedAudit } from '../../src/core/status';
import { changeActivities } from '../activity-options';
import { retryWhileLockBusy } from './lock-retry';
import { RetireResult, RetireState, retireStateQuery, revertSignal } from '../definitions';
import { flags } from '../patches';

export interface RetireInput {
  changeId: string;
  database: string;
  step: number;
  table: QualifiedName;
  keepOldMs: number;
}

/** The revert's swap: the lock_timeout of each attempt, and how long it may keep trying. */
const REVERT_LOCK_TIMEOUT_MS = 2_000;
const REVERT_MAX_WAIT_MS = 10 * 60_000;
/** A sync round leaves at most this many logged rows before the check and the swap back. */
const CAUGHT_UP_ROWS = 2_000;

export async function rewriteRetireWorkflow(input: RetireInput): Promise<RetireResult> {
  const ref = { changeId: input.changeId, database: input.database, step: input.step, table: input.table };
  const quick = changeActivities.quick;
  // (Executions begun before revert existed only wait and drop: their replays must do the same.)
  if (!flags.revertibleRewrite) {
    await sleep(Math.max(1, input.keepOldMs));
    return quick.dropOldTable(ref);
  }
  const keepOldMs = Math.max(1, input.keepOldMs);
  const state: RetireState = { phase: 'KEEPING', until: new Date(Date.now() + keepOldMs).toISOString() };
  let asked: Audit | undefined;
  setHandler(retireStateQuery, () => state);
  setHandler(revertSignal, (audit) => {
    if (state.phase === 'KEEPING' && asked === undefined) asked = checkedAudit(audit);
  });
  const captureId = revertCaptureId(input.changeId, input.step);
  const release = () => releaseCapture(input.database, captureId);
  for (;;) {
    const left = Date.parse(state.until) - Date.now();
    if (left <= 0 || !(await condition(() => asked !== undefined, left))) break;
    state.phase = 'REVERTING';
    state.revert = { ...asked, requestedAt: new Date().toISOString() };
    (state.reverts ??= []).push(state.revert);
    asked = undefined;
    try {
      Object.assign(state.revert, await revert(ref));
      await release();
      state.phase = 'REVERTED';
      state.until = new Date(Date.now() + keepOldMs).toISOString();
      await sleep(keepOldMs);
      await quick.dropRevertedTable(ref);
      return { dropped: false, reverted: true, reverts: state.reverts };
    } catch (err) {
      state.revert.error = rootMessage(err);
      (state.failures ??= []).push(state.revert.error);
      state.phase = 'KEEPING';
    }
  }
  // keepOld has passed: nothing to go back to any more.
  await release();
  const dropped = await quick.dropOldTable(ref);
  state.phase = 'DROPPED';
  return state.reverts ? { ...dropped, reverts: state.reverts } : dropped;
}

/**
 * Capture off the new table: its functions become no-ops at once; a trigger whose table lock is
 * busy (500 ms each try) is dropped on a later try.
 */
async function releaseCapture(database: string, migrationId: string): Promise<void> {
  for (let n = 1; ; n += 1) {
    const { pending } = await changeActivities.quick.releaseSource({ migrationId, source: database, freeze: 'remove' });
    if (pending.length === 0 || n >= 30) return;
    await sleep(Math.min(60_000, 1_000 * n));
  }
}

type RevertRef = { changeId: string; database: string; step: number; table: QualifiedName };

/** Carry the writes back, check, swap back. */
async function revert(ref: RevertRef): Promise<{ lockedMs: number; carried: number; rows: number }> {
  const acts = changeActivities.forStep(60 * 60_000);
  const prepared = await changeActivities.quick.prepareRevert(ref);
  const data = { ...ref, ...prepared };
  let carried = 0;
  const catchUp = async () => {
    for (;;) {
      const { applied, left } = await acts.syncRevert({ ...data, maxRows: 200_000 });
      carried += applied;
      if (left <= CAUGHT_UP_ROWS) return;
    }
  };
  await catchUp();
  const { rows } = await acts.validateRevert(data);
  const swap = await retryWhileLockBusy({ what: "the swap back's lock", maxWaitMs: REVERT_MAX_WAIT_MS, between: catchUp }, () =>
    acts.swapRevert({ ...data, lockTimeoutMs: REVERT_LOCK_TIMEOUT_MS }),
  );
  // Re-added NOT VALID; a failed validation leaves them so, which the data cannot violate anyway.
  if (swap.foreignKeys.length) {
    await acts.validateReferencingForeignKeys({ database: ref.database, foreignKeys: swap.foreignKeys }).catch(() => undefined);
  }
  return { lockedMs: swap.lockedMs, carried: carried + swap.drained, rows };
}
