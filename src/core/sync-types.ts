/**
 * What the sync and the dirty-key check take and give back (activities/sync-changes.ts,
 * activities/check-dirty.ts): in one place, because the workflows and the cutover's drain
 * (activities/drain.ts, which calls both) speak them too, and activities do not import each other.
 */
import type { CopyTable } from './plan';

export interface SyncInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  fence: number;
  sliceMs: number;
  /** Keys per round. */
  batchKeys: number;
  /** Record applied keys in the dirty set (the table's validation has begun). */
  recordDirty: boolean;
  /**
   * Return as soon as the log is caught up (first catch-up, final drain). Otherwise keep
   * polling the log every POLL_MS for the whole slice: one activity per slice instead of one
   * per poll keeps Temporal's own load off the machines.
   */
  returnWhenCaughtUp: boolean;
  /**
   * Sessions that apply a round at once, each its share of the keys by key hash, in its own
   * fenced target transaction (`parallelism.apply`; absent: one). A table with unique indexes
   * besides its key is applied by one session whatever this says.
   */
  lanes?: number;
  /**
   * With returnWhenCaughtUp: keep polling the log (every POLL_MS) this long while the rounds
   * find changes, rather than returning after the first round that caught up. A look that finds
   * the log empty (an idle table, which then frees its activity slot) or the source frozen (the
   * cutover is about to ask for the finish) returns at once; one that begins with the source
   * frozen applies nothing and returns caught up, leaving the last changes to the cutover's drain
   * (only a ready table's own slices dwell, never a drain's). Absent: no dwell.
   */
  busyDwellMs?: number;
  /**
   * With busyDwellMs: no dwell when this activity waited longer than this for a worker slot
   * (measured from its attempt's scheduling, on the Temporal server's clock): work is queued
   * behind the syncs, and the result says `crowded` so the table pauses off the slot instead.
   */
  crowdedAfterMs?: number;
  /**
   * The cutover's first drain of the table: take the sync's fence even when the log is empty
   * (no look without it), so that from here on no slice or re-check of the table's own workflow
   * can write (PATCHES.sealedDrain: the drain's fences are ahead of any the table hands out).
   */
  seal?: boolean;
  /**
   * Set by the cutover's drain on its first slice of a table only: it has just sealed the table's
   * group and checked their capture together (activities/drain.ts), so this slice does not check
   * it again. Never set by a workflow.
   */
  captureChecked?: boolean;
}

export interface SyncResult {
  applied: number;
  rounds: number;
  /**
   * The last round found less than a full batch: the sync keeps up. (With live writers the log
   * is never empty for long; "caught up" must not wait for that, or hot tables never converge.)
   */
  caughtUp: boolean;
  pending: number;
  lagSeconds: number;
  /** The slice waited longer than crowdedAfterMs for its slot and so did not dwell. */
  crowded?: boolean;
}

export interface CheckDirtyInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  batchKeys?: number;
  /** A table's own re-check: its page writes under the table's sync fence (see createCheckDirty). */
  fence?: number;
}

export interface CheckDirtyResult {
  checked: number;
  /** Keys whose rows differed; they were put back into the change log. */
  mismatched: number;
  /** Keys skipped because they were waiting in the change log. */
  waiting: number;
  /** Dirty keys left after the check. */
  remaining: number;
}
