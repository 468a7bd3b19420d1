/**
 * drainTables: the cutover's last drain and check of a group of tables in one activity — for
 * each, its change log applied until empty (the source is frozen and its writers are done, so
 * the log can only shrink), then its changed rows compared (checkDirtyKeys), drained and
 * compared once more when some differed. One activity for many tables instead of two or more
 * each: inside the write outage every activity is a round trip through Temporal and a slot on a
 * worker, which for a small table cost more than its drain.
 *
 * The first slice of each table seals it (SyncInput.seal): it takes the table's sync fence
 * whatever its log holds, so that no slice or re-check its own workflow still runs can write
 * afterwards. Each further slice takes a bigger fence; an attempt's fences are all above every
 * earlier attempt's, so a retried drain supersedes a lost one.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { FAILURE } from '../src/core/failure-types';
import { Limiter } from '../src/core/limiter';
import { CopyTable } from '../src/core/plan';
import type { CheckDirtyInput, CheckDirtyResult, SyncInput, SyncResult } from '../src/core/sync-types';

export interface DrainTablesInput {
  migrationId: string;
  source: string;
  target: string;
  tables: CopyTable[];
  /** The group's sealing fence, ahead of any fence the tables' own workflows hand out. */
  fence: number;
  sliceMs: number;
  batchKeys: number;
  /** Record the keys applied in the dirty set, and compare them afterwards (validation is not none). */
  check: boolean;
  /** Sessions that apply a round at once (`parallelism.apply`; absent: one). */
  lanes?: number;
}

export interface DrainedTable {
  index: number;
  /** Changed rows compared after the drain. */
  checked: number;
  /** Rows that still differed after a second drain. */
  mismatched: number;
  /** Dirty keys left after the last check. */
  remaining: number;
}

/** The two activities a drain is made of, as activities/index.ts hands them over. */
export interface DrainParts {
  syncChanges(input: SyncInput): Promise<Pick<SyncResult, 'caughtUp' | 'pending'>>;
  checkDirtyKeys(input: CheckDirtyInput): Promise<Pick<CheckDirtyResult, 'checked' | 'mismatched' | 'remaining'>>;
}

/**
 * Tables of a group drained at once (each takes a pair of sessions, more with lanes), within
 * the worker's budget (`places`).
 */
const TABLES_AT_ONCE = 4;
/** How often a table waiting for a place among the worker's drains heartbeats. */
const WAITING_HEARTBEAT_MS = 2_000;
/** Slices of one table per attempt: its fences step by one within the attempt's thousand. */
const SLICES_PER_ATTEMPT = 1000;

/**
 * `places`: the tables the worker drains at once across all its drainTables activities — as
 * many as it has activity slots, so that the drain's sessions stay within what that many
 * single-table activities would hold (every group runs at once, and a group's four tables would
 * otherwise take four pairs per slot: 300 tables on two workers ran the database out of
 * connections).
 */
export function createDrainTables(activities: DrainParts, places: Limiter) {
  return async function drainTables(input: DrainTablesInput): Promise<{ tables: DrainedTable[] }> {
    const { attempt } = Context.current().info;
    const drained: DrainedTable[] = [];
    let next = 0;
    const worker = async () => {
      while (next < input.tables.length) {
        const table = input.tables[next++];
        const release = await takePlace(places);
        try {
          drained.push(await drainTable(input, table, attempt, activities));
        } finally {
          release();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(TABLES_AT_ONCE, input.tables.length) }, worker));
    return { tables: drained.sort((a, b) => a.index - b.index) };
  };
}

/** A place among the worker's drains, heartbeating while it waits (a cancellation ends the wait). */
async function takePlace(places: Limiter): Promise<() => void> {
  const ctx = Context.current();
  const beat = setInterval(() => ctx.heartbeat(), WAITING_HEARTBEAT_MS);
  try {
    return await places.acquire(ctx.cancellationSignal);
  } finally {
    clearInterval(beat);
  }
}

async function drainTable(
  input: DrainTablesInput,
  table: CopyTable,
  attempt: number,
  { syncChanges, checkDirtyKeys }: DrainParts,
): Promise<DrainedTable> {
  const ref = { migrationId: input.migrationId, source: input.source, target: input.target, table };
  let slice = 0;
  const drainAll = async () => {
    for (;;) {
      if (slice >= SLICES_PER_ATTEMPT) throw ApplicationFailure.retryable(`the drain of table #${table.index} took ${SLICES_PER_ATTEMPT} slices in one attempt`);
      const r = await syncChanges({
        ...ref,
        fence: input.fence + (attempt - 1) * SLICES_PER_ATTEMPT + slice,
        sliceMs: input.sliceMs,
        batchKeys: input.batchKeys,
        recordDirty: input.check,
        returnWhenCaughtUp: true,
        ...(slice === 0 ? { seal: true } : {}),
        ...(input.lanes && input.lanes > 1 ? { lanes: input.lanes } : {}),
      }).catch((err: unknown) => {
        // The workflow reports which table lost its capture.
        if (err instanceof ApplicationFailure && err.type === FAILURE.CaptureLost) {
          throw ApplicationFailure.create({ type: FAILURE.CaptureLost, message: err.message, nonRetryable: true, details: [{ tableIndex: table.index }] });
        }
        throw err;
      });
      slice += 1;
      if (r.caughtUp && r.pending === 0) return;
    }
  };
  await drainAll();
  if (!input.check) return { index: table.index, checked: 0, mismatched: 0, remaining: 0 };
  let check = await checkDirtyKeys(ref);
  if (check.mismatched > 0) {
    await drainAll();
    check = await checkDirtyKeys(ref);
  }
  return { index: table.index, checked: check.checked, mismatched: check.mismatched, remaining: check.remaining };
}
