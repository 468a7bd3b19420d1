/**
 * drainTables: the cutover's last drain and check of a group of tables in one activity — for
 * each, its change log applied until empty (the source is frozen and its writers are done, so
 * the log can only shrink), then its changed rows compared (checkDirtyKeys), drained and
 * compared once more when some differed. One activity for many tables instead of two or more
 * each: inside the write outage every activity is a round trip through Temporal and a slot on a
 * worker, which for a small table cost more than its drain.
 *
 * The drain first seals the whole group (sealGroup): it takes every table's sync fence at once,
 * so that no slice or re-check the tables' own workflows still run can write afterwards, checks
 * their capture in set form, and finds the quiet tables — an empty change log and, when the
 * drain compares, an empty dirty set — which need nothing more: the source is frozen, so their
 * logs stay empty. Only the others are drained one by one, from a slice that seals again
 * (SyncInput.seal: its fence taken whatever the log holds). Each slice takes a bigger fence than
 * the last; an attempt's fences are all above every earlier attempt's, so a retried drain
 * supersedes a lost one.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { FAILURE } from '../src/core/failure-types';
import { Limiter } from '../src/core/limiter';
import { CopyTable, isKeyless } from '../src/core/plan';
import type { CheckDirtyInput, CheckDirtyResult, SyncInput, SyncResult } from '../src/core/sync-types';
import { claimSyncs, SYNC_CHUNK, tablesWithDirtyKeys } from '../src/db/bookkeeping';
import { assertCaptureIntact, captureSuspects } from '../src/db/capture-check';
import { tablesWithChanges } from '../src/db/change-log';
import { fenceToken, superseded } from '../src/db/fenced';
import type { ActivityDeps } from './deps';

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

/** What a drain is made of, as activities/index.ts hands it over. */
export interface DrainParts {
  /** Seals the group with `token` and returns its quiet tables (createSealGroup). */
  sealGroup(input: DrainTablesInput, token: number, owner: string): Promise<number[]>;
  syncChanges(input: SyncInput): Promise<Pick<SyncResult, 'caughtUp' | 'pending'>>;
  checkDirtyKeys(input: CheckDirtyInput): Promise<Pick<CheckDirtyResult, 'checked' | 'mismatched' | 'remaining'>>;
}

/** A CaptureLost failure that names its table, for the workflow to report. */
function naming(table: CopyTable) {
  return (err: unknown): never => {
    if (err instanceof ApplicationFailure && err.type === FAILURE.CaptureLost) {
      throw ApplicationFailure.create({ type: FAILURE.CaptureLost, message: err.message, nonRetryable: true, details: [{ tableIndex: table.index }] });
    }
    throw err;
  };
}

/**
 * The group's seal, in a handful of statements whatever its size: every table's sync fence taken
 * with `token` (any table whose fence a newer attempt holds stops this one as Superseded), capture
 * checked in set form, and the indexes of the quiet tables returned. A table without a key
 * applies its log from a watermark (keyless-online.ts) and is always drained on its own.
 */
export function createSealGroup({ connections }: Pick<ActivityDeps, 'connections'>) {
  return async function sealGroup(input: DrainTablesInput, token: number, owner: string): Promise<number[]> {
    const { migrationId, tables } = input;
    const indexes = tables.map((t) => t.index);
    const sealed = new Set(await connections.withClient(input.target, (db) => claimSyncs(db, migrationId, indexes, token, owner)));
    const lost = indexes.find((index) => !sealed.has(index));
    if (lost !== undefined) throw superseded({ migrationId, tableIndex: lost, chunkIndex: SYNC_CHUNK });
    const keyed = tables.filter((t) => !isKeyless(t)).map((t) => t.index);
    const changed = await connections.withClient(input.source, async (db) => {
      for (const table of await captureSuspects(db, migrationId, tables)) await assertCaptureIntact(db, { migrationId, table }).catch(naming(table));
      return tablesWithChanges(db, migrationId, keyed);
    });
    const dirty = input.check ? await connections.withClient(input.target, (db) => tablesWithDirtyKeys(db, migrationId, keyed)) : [];
    const stirred = new Set([...changed, ...dirty]);
    return keyed.filter((index) => !stirred.has(index));
  };
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
    const { attempt, activityId } = Context.current().info;
    const sealing = await takePlace(places);
    let quiet: Set<number>;
    try {
      quiet = new Set(await activities.sealGroup(input, fenceToken(firstFence(input, attempt), attempt), `${activityId}#${attempt}`));
    } finally {
      sealing();
    }
    const drained: DrainedTable[] = [...quiet].map((index) => ({ index, checked: 0, mismatched: 0, remaining: 0 }));
    const left = input.tables.filter((t) => !quiet.has(t.index));
    let next = 0;
    const worker = async () => {
      while (next < left.length) {
        const table = left[next++];
        const release = await takePlace(places);
        try {
          drained.push(await drainTable(input, table, attempt, activities));
        } finally {
          release();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(TABLES_AT_ONCE, left.length) }, worker));
    return { tables: drained.sort((a, b) => a.index - b.index) };
  };
}

/** The fence of an attempt's first slice (the group's seal): a thousand per attempt. */
function firstFence(input: DrainTablesInput, attempt: number): number {
  return input.fence + (attempt - 1) * SLICES_PER_ATTEMPT;
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
  // Slice 0's fence is the group's seal.
  let slice = 1;
  const drainAll = async () => {
    for (;;) {
      if (slice >= SLICES_PER_ATTEMPT) throw ApplicationFailure.retryable(`the drain of table #${table.index} took ${SLICES_PER_ATTEMPT} slices in one attempt`);
      const r = await syncChanges({
        ...ref,
        fence: firstFence(input, attempt) + slice,
        sliceMs: input.sliceMs,
        batchKeys: input.batchKeys,
        recordDirty: input.check,
        returnWhenCaughtUp: true,
        // (The seal checked the group's capture just before.)
        ...(slice === 1 ? { seal: true, captureChecked: true } : {}),
        ...(input.lanes && input.lanes > 1 ? { lanes: input.lanes } : {}),
        // The workflow reports which table lost its capture.
      }).catch(naming(table));
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
