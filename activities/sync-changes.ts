/**
 * Online mode, after a table's copy: the change log is a queue, consumed state-based.
 *
 * syncChanges: read the visible log rows, re-read each logged key's *current* source row and
 * replace the target's (deleted when gone) in one fenced target transaction, then delete exactly
 * those log ids. Never a sequence watermark: a transaction can take a lower id and commit after a
 * higher one. Re-applying a key is harmless, so a crash anywhere loses nothing.
 *
 * enqueueKeys: online repair — validation puts the keys of differing ranges back into the log
 * instead of re-copying under a running sync.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { ClientBase } from 'pg';
import { SYNC_CHUNK } from '../src/db/bookkeeping';
import { FencedLane, FencedSessions, withFencedSessions } from '../src/db/fenced';
import { assertCaptureIntact, assertKeyIntact } from '../src/db/capture-check';
import { quotedLog, readFreezeState } from '../src/db/capture-sql';
import { enqueue, keysFromJson, logLag, POLL_MS, vacuumLogWhenDue } from '../src/db/change-log';
import { withCatalogKeyTypes } from '../src/db/catalog';
import { copyStream, deleteKeys, selectColumns } from '../src/db/copy-stream';
import { asActivityFailure } from '../src/db/errors';
import type { SyncInput, SyncResult } from '../src/core/sync-types';
import { distinctKeys, keyAsText, keyFromRow, keyInList, keyOrder, keyPredicate, literalBinder, ParamBinder, rangeBounds } from '../src/db/ranges';
import { evictConflictsSql, readUniqueKeys } from '../src/db/unique-keys';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified } from '../src/core/identifiers';
import { CopyTable, INTEGER_TYPES, isKeyless, Key, KeyRange } from '../src/core/plan';
import { syncKeylessSlice } from '../src/db/keyless-sync';
import { ActivityDeps, tableLabel } from './deps';

export type { SyncInput, SyncResult } from '../src/core/sync-types';

export interface EnqueueInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  ranges: KeyRange[];
}

export { POLL_MS };

/** Rounds of eviction inside one batch before the rest goes back to the log. */
const MAX_EVICTION_ROUNDS = 8;

export interface Applied {
  /** Every key whose target row now equals the source's (evicted rows included). */
  applied: Key[];
  /** Keys evicted in the last round: their rows left the target, the log must replay them. */
  requeue: Key[];
}

/** Key types whose equal values are the same value (and the only types of identity columns). */

/** Deletes the target's rows of `keys` that the staged source rows no longer have. */
function deleteGoneSql(table: CopyTable, stage: QualifiedName, keys: Key[]): string {
  const same = table.keyColumns.map((k) => `s.${quoteIdent(k.name)} = t.${quoteIdent(k.name)}`).join(' AND ');
  return `DELETE FROM ${quoteQualified(table.target)} AS t WHERE ${keyInList(table, keys, literalBinder)} AND NOT EXISTS (SELECT 1 FROM ${quoteQualified(stage)} AS s WHERE ${same})`;
}

/**
 * The staged source rows into the target: updated in place where the key is there (a HOT
 * update when no indexed column changed: no new index entries, no dead row for the rest of the
 * table's indexes), inserted where it is not. The key columns are set too: a key changed to an
 * equal but different value (numeric 1.0 to 1.00, a case-insensitive text's case) conflicts
 * with the old one and must still arrive; an unchanged key keeps the update HOT, as PostgreSQL
 * compares the stored bytes. Integer keys are left out: equal integers are the same value, and
 * an identity column GENERATED ALWAYS (always an integer) refuses to be set by an UPDATE; so are
 * generated keys, which are not copied but computed.
 */
function upsertSql(table: CopyTable, stage: QualifiedName): string {
  const keys = new Set(table.keyColumns.map((k) => k.name));
  const settableKeys = table.keyColumns.filter((k) => !INTEGER_TYPES.has(k.type) && table.columns.includes(k.name)).map((k) => k.name);
  const set = [...settableKeys, ...table.columns.filter((c) => !keys.has(c))];
  if (set.length === 0) {
    return `INSERT INTO ${quoteQualified(table.target)} (${selectColumns(table)}) OVERRIDING SYSTEM VALUE SELECT ${selectColumns(table)} FROM ${quoteQualified(stage)} ON CONFLICT DO NOTHING`;
  }
  return (
    `INSERT INTO ${quoteQualified(table.target)} (${selectColumns(table)}) OVERRIDING SYSTEM VALUE SELECT ${selectColumns(table)} FROM ${quoteQualified(stage)} ` +
    `ON CONFLICT (${table.keyColumns.map((k) => quoteIdent(k.name)).join(', ')}) DO UPDATE SET ${set.map((c) => `${quoteIdent(c)} = EXCLUDED.${quoteIdent(c)}`).join(', ')}`
  );
}

/**
 * Makes the target's rows for `keys` the source's current rows (inside a transaction the
 * caller owns, whose commit empties the staging table): the source rows go into a staging
 * table, then into the target — merged on the key, where nothing else can conflict (an update
 * in place keeps the target's indexes and heap from filling with dead rows, which a delete and
 * insert of every changed row would leave). Where the target has unique or exclusion indexes
 * besides its key, the batch's rows are deleted and re-inserted instead, and target rows that
 * conflict with them — stale rows whose change is still in the log — are evicted and replayed
 * from the source in the same transaction (see src/db/unique-keys.ts).
 */
export async function applyKeys(source: ClientBase, target: ClientBase, table: CopyTable, keys: Key[], onProgress: () => void = () => undefined): Promise<Applied> {
  // The lock first, then the catalog: an index created later is seen by the next batch.
  await target.query(`LOCK TABLE ${quoteQualified(table.target)} IN ROW EXCLUSIVE MODE`);
  const uniques = await readUniqueKeys(target, table.target, table.keyColumns.map((k) => k.name));
  const select = (batch: Key[]) => `SELECT ${selectColumns(table)} FROM ${quoteQualified(table.source)} WHERE ${keyInList(table, batch, literalBinder)}`;
  // One staging table per session, emptied in place by each commit: a TRUNCATE per batch would
  // give it a new file and its pg_class row a new version every time (catalog churn that adds
  // up over a sync's thousands of small rounds).
  const stage: QualifiedName = { schema: 'pg_temp', name: `ferry_stage_${table.index}` };
  await target.query(`CREATE TEMP TABLE IF NOT EXISTS ${quoteQualified(stage)} (LIKE ${quoteQualified(table.target)} INCLUDING GENERATED) ON COMMIT DELETE ROWS`);
  if (uniques.length === 0) {
    // Only the key can conflict: the staged rows merged in one statement, the rows gone from
    // the source deleted in another.
    await copyStream(source, target, { ...table, target: stage }, select(keys), onProgress);
    await target.query(deleteGoneSql(table, stage, keys));
    await target.query(upsertSql(table, stage));
    return { applied: keys, requeue: [] };
  }
  const applied = [...keys];
  let batch = keys;
  for (let round = 0; batch.length > 0; round += 1) {
    if (round >= MAX_EVICTION_ROUNDS) return { applied, requeue: batch };
    await copyStream(source, target, { ...table, target: stage }, select(batch), onProgress);
    await deleteKeys(target, table, batch);
    const evicted: Key[] = [];
    for (const key of uniques) {
      const { rows } = await target.query(evictConflictsSql(table.target, quoteQualified(stage), key, table));
      evicted.push(...rows.map((r) => keyFromRow(r, table)));
    }
    // OVERRIDING SYSTEM VALUE: the source's values of a GENERATED ALWAYS identity column too (COPY writes them as they are).
    await target.query(`INSERT INTO ${quoteQualified(table.target)} (${selectColumns(table)}) OVERRIDING SYSTEM VALUE SELECT ${selectColumns(table)} FROM ${quoteQualified(stage)}`);
    // The evicted rows are staged in the same transaction: the stage emptied for them here.
    if (evicted.length > 0) await target.query(`DELETE FROM ${quoteQualified(stage)}`);
    batch = distinctKeys(evicted);
    applied.push(...batch);
  }
  return { applied: distinctKeys(applied), requeue: [] };
}

const ENQUEUE_PAGE = 10_000;

/** Up to ENQUEUE_PAGE keys of `range` in `relation`, after `after`, in key order. */
async function keyPage(db: ClientBase, table: CopyTable, relation: QualifiedName, range: KeyRange, after: Key | null): Promise<Key[]> {
  const binder = new ParamBinder();
  const bounds = [...rangeBounds(range), ...(after ? [{ op: '>' as const, key: after }] : [])];
  const { rows } = await db.query(
    `SELECT ${keyAsText(table)} FROM ${quoteQualified(relation)} WHERE ${keyPredicate(table, bounds, binder)} ORDER BY ${keyOrder(table)} LIMIT ${ENQUEUE_PAGE}`,
    binder.params,
  );
  return rows.map((r) => keyFromRow(r, table));
}

/** Keys per sync round: within [SYNC_ROUND_MIN, 4 × the workflow's size]. */
export const SYNC_ROUND_MIN = 100;
const QUICK_ROUND_MS = 1_000;
const SLOW_ROUND_MS = 4_000;

/** Doubles a full round that was quick, halves one that was slow. */
export function nextRoundKeys(size: number, found: number, ms: number, base: number): number {
  if (found >= size && ms < QUICK_ROUND_MS) return Math.min(base * 4, size * 2);
  if (ms > SLOW_ROUND_MS) return Math.max(SYNC_ROUND_MIN, Math.floor(size / 2));
  return size;
}

/**
 * The cutover has begun (or is over) on the source: its freeze state is past open. A source
 * without the armed freeze (capture installed by an older Ferry) counts as frozen: no dwell.
 */
async function frozen(source: ClientBase, migrationId: string): Promise<boolean> {
  return (await readFreezeState(source, migrationId)) !== 'open';
}

const DWELL_LOOK_MS = 100;

/** Waits `ms`, looking at the freeze state every DWELL_LOOK_MS; true as soon as the source is frozen. */
async function frozenDuring(ctx: Context, source: ClientBase, migrationId: string, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  for (;;) {
    if (await frozen(source, migrationId)) return true;
    const left = until - Date.now();
    if (left <= 0) return false;
    await ctx.sleep(Math.min(DWELL_LOOK_MS, left));
  }
}

/** Capture intact (or the sync fails as it would in a slice) and nothing in the table's log. */
async function logIsEmpty(source: ClientBase, input: SyncInput): Promise<boolean> {
  await assertCaptureIntact(source, input);
  const log = quotedLog(input.migrationId, input.table.index);
  const { rows } = await source.query(`SELECT NOT EXISTS (SELECT 1 FROM ${log}) AS empty`);
  return rows[0].empty === true;
}

/** Splits `keys` into `count` shares by a hash of each key: a key always lands in the same share. */
export function shareByKeyHash(keys: Key[], count: number): Key[][] {
  if (count === 1) return [keys];
  const shares: Key[][] = Array.from({ length: count }, () => []);
  for (const key of keys) {
    // FNV-1a over the key's text: cheap, and spread well enough for a handful of shares.
    let hash = 0x811c9dc5;
    for (const ch of JSON.stringify(key)) hash = Math.imul(hash ^ ch.charCodeAt(0), 0x01000193);
    shares[(hash >>> 0) % count].push(key);
  }
  return shares;
}

/**
 * One round's keys applied by the lanes at once (one lane: the sync's own fenced sessions), each
 * its share in its own transaction, the keys it applied recorded as dirty in the same
 * transaction. Every lane runs to its end before this returns or throws, so no session is
 * still writing when the slice ends them. A lane that
 * failed leaves the round's log rows in place: the keys the others applied are applied again
 * later, which is harmless.
 */
async function applyInLanes(input: SyncInput, lanes: FencedLane[], keys: Key[], onProgress: () => void): Promise<Applied> {
  const shares = shareByKeyHash(keys, lanes.length);
  const outcomes = await Promise.allSettled(
    lanes.map((lane, i) =>
      shares[i].length === 0
        ? Promise.resolve<Applied>({ applied: [], requeue: [] })
        : lane.write(async () => {
            const result = await applyKeys(lane.source, lane.target, input.table, shares[i], onProgress);
            if (input.recordDirty) await recordDirty(lane.target, input.migrationId, input.table.index, result.applied);
            return result;
          }),
    ),
  );
  const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
  if (failed) throw failed.reason;
  const done = outcomes.map((o) => (o as PromiseFulfilledResult<Applied>).value);
  return { applied: done.flatMap((d) => d.applied), requeue: done.flatMap((d) => d.requeue) };
}

/** Records applied keys in the target's dirty set, for validation to look at again. */
async function recordDirty(target: ClientBase, migrationId: string, tableIndex: number, keys: Key[]): Promise<void> {
  await target.query(
    `INSERT INTO _ferry.dirty (migration_id, table_index, pk)
     SELECT $1, $2, k.pk FROM (${keysFromJson('$3')}) AS k (pk)
     ON CONFLICT DO NOTHING`,
    [migrationId, tableIndex, JSON.stringify(keys)],
  );
}

/**
 * Rounds until the slice is over (or, returnWhenCaughtUp, until the log runs dry): read the
 * visible log rows, apply their keys in one fenced target transaction, then delete exactly
 * those log rows. Each round commits before the next begins, so stopping anywhere loses nothing.
 */
async function syncSlice(input: SyncInput, { source, target, write, lanes: openLanes }: FencedSessions): Promise<SyncResult> {
  const ctx = Context.current();
  const log = quotedLog(input.migrationId, input.table.index);
  const started = Date.now();
  let applied = 0;
  let rounds = 0;
  let caughtUp = false;
  // Rounds grow while they are quick and full, shrink when slow: a round is one target
  // transaction, and one that runs for long holds its locks and delays the next heartbeat.
  let roundKeys = input.batchKeys;
  let deletedSinceVacuum = 0;
  // Whether the last round found changes: a busy table dwells, an idle one returns.
  let busy = false;
  const dwelling = () => input.busyDwellMs !== undefined && busy && Date.now() - started < input.busyDwellMs;
  const heartbeat = () => ctx.heartbeat({ applied, roundKeys });
  // Lanes only where nothing but the key can conflict: the eviction of rows holding a unique
  // value (applyKeys) must see the whole round. An index made unique later is seen by each
  // lane's applyKeys under its lock, which then evicts within its share.
  const laneCount = input.lanes ?? 1;
  const lanes = laneCount > 1 && (await readUniqueKeys(target, input.table.target, input.table.keyColumns.map((k) => k.name))).length === 0 ? await openLanes(laneCount) : [{ source, target, write }];
  while (Date.now() - started < input.sliceMs) {
    if (ctx.cancellationSignal.aborted) throw new CancelledFailure('sync slice cancelled');
    if (caughtUp) {
      if (input.returnWhenCaughtUp && !dwelling()) break;
      heartbeat();
      if (input.returnWhenCaughtUp) {
        // Dwelling: the freeze is looked at every DWELL_LOOK_MS of the wait, so that the cutover,
        // whose outage waits for this activity to end, never waits a whole poll for it.
        if (await frozenDuring(ctx, source, input.migrationId, POLL_MS)) break;
      } else {
        await ctx.sleep(POLL_MS);
      }
    }
    const size = roundKeys;
    const roundStarted = Date.now();
    const { rows } = await source.query(`SELECT id, pk FROM ${log} ORDER BY id LIMIT ${size}`);
    busy = rows.length > 0;
    if (rows.length === 0) {
      caughtUp = true;
      continue;
    }
    const done = await applyInLanes(input, lanes, distinctKeys(rows.map((r) => r.pk as Key)), heartbeat);
    deletedSinceVacuum = await retireLogRows(source, log, rows, done.requeue, deletedSinceVacuum);
    applied += done.applied.length;
    rounds += 1;
    heartbeat();
    caughtUp = rows.length < size;
    roundKeys = nextRoundKeys(size, rows.length, Date.now() - roundStarted, input.batchKeys);
  }
  return { applied, rounds, caughtUp, ...(await logLag(source, log)) };
}

/**
 * Only after the target committed: the keys it evicted back into the log, then exactly the log
 * rows that were applied deleted, and the log vacuumed when due (vacuumLogWhenDue).
 * Returns the rows deleted since the last vacuum.
 */
async function retireLogRows(source: ClientBase, log: string, rows: { id: unknown }[], requeue: Key[], deletedSinceVacuum: number): Promise<number> {
  await enqueue(source, log, requeue);
  await source.query(`DELETE FROM ${log} WHERE id = ANY ($1::int8[])`, [rows.map((r) => r.id)]);
  return vacuumLogWhenDue(source, log, deletedSinceVacuum + rows.length);
}


/** A dwelling slice that waited for its worker slot longer than crowdedAfterMs (SyncInput). */
function waitedTooLong(input: SyncInput): boolean {
  if (input.busyDwellMs === undefined || input.crowdedAfterMs === undefined) return false;
  return Date.now() - Context.current().info.currentAttemptScheduledTimestampMs > input.crowdedAfterMs;
}

export function createSyncActivities({ connections, logger, metrics }: ActivityDeps) {
  async function syncChanges(input: SyncInput): Promise<SyncResult> {
    const crowded = waitedTooLong(input);
    const result = await syncOrEmpty(crowded ? { ...input, busyDwellMs: undefined } : input);
    metrics?.changesApplied.inc({ table: tableLabel(input.table) }, result.applied);
    metrics?.changeLag.set({ table: tableLabel(input.table) }, result.pending);
    return crowded ? { ...result, crowded } : result;
  }

  async function syncOrEmpty(input: SyncInput): Promise<SyncResult> {
    try {
      // A ready table's slice begun inside the cutover's write outage applies nothing: the drain
      // applies what is left, and this slice's rounds and fence claims would only compete with it
      // on the same cores (at 200 tables, 30–45 of the tables' slices began after the freeze,
      // while the drain's claims waited up to half a second for the fences they held).
      if (input.busyDwellMs !== undefined) {
        const left = await connections.withClient(input.source, async (db) =>
          // (Not where the freeze is absent: capture of an older Ferry, frozen only by its cutover's locks.)
          (await readFreezeState(db, input.migrationId)) === 'frozen' ? logLag(db, quotedLog(input.migrationId, input.table.index)) : undefined,
        );
        if (left) return { applied: 0, rounds: 0, caughtUp: true, ...left };
      }
      // A caught-up table's look at an empty log writes nothing, so it needs no fence: capture
      // is checked and the log looked at on a pooled connection, without the two new sessions
      // and the fence committed on the target that applying takes (in a 100-table run, such
      // looks were most of the workers' time).
      if (input.returnWhenCaughtUp && !input.seal && (await connections.withClient(input.source, (db) => logIsEmpty(db, input)))) {
        return { applied: 0, rounds: 0, caughtUp: true, pending: 0, lagSeconds: 0 };
      }
      return await withFencedSessions(connections, input, SYNC_CHUNK, async (sessions) => {
        if (!input.captureChecked) await assertCaptureIntact(sessions.source, { ...input, table: sessions.table });
        // A table without a key: its log holds row images, applied from a watermark (keyless-online.ts).
        if (isKeyless(sessions.table)) return await syncKeylessSlice(input, sessions);
        await assertKeyIntact(sessions.source, sessions.table);
        return await syncSlice({ ...input, table: sessions.table }, sessions);
      });
    } catch (err) {
      if (err instanceof CancelledFailure) throw err;
      // Logged as it leaves the worker: a PostgreSQL error's row values stay out of the log too.
      const failure = asActivityFailure(err, `sync ${displayQualified(input.table.source)}`);
      if (!(err instanceof ApplicationFailure)) logger.warn({ err: failure, migrationId: input.migrationId, table: displayQualified(input.table.source) }, 'sync failed');
      throw failure;
    }
  }

  /**
   * Puts every key of the ranges, as either side has them, back into the change log — a page
   * at a time, so a range as large as a whole chunk never sits in the worker's memory.
   */
  async function enqueueKeys(input: EnqueueInput): Promise<{ enqueued: number }> {
    const ctx = Context.current();
    const log = quotedLog(input.migrationId, input.table.index);
    const table = await connections.withClient(input.source, (db) => withCatalogKeyTypes(db, input.table));
    let enqueued = 0;
    for (const range of input.ranges) {
      for (const [side, relation] of [
        [input.target, table.target],
        [input.source, table.source],
      ] as const) {
        for (let after: Key | null = null; ; ) {
          const page = await connections.withClient(side, (db) => keyPage(db, table, relation, range, after));
          if (page.length > 0) await connections.withClient(input.source, (db) => enqueue(db, log, page));
          enqueued += page.length;
          ctx.heartbeat({ enqueued });
          if (page.length < ENQUEUE_PAGE) break;
          after = page[page.length - 1];
        }
      }
    }
    return { enqueued };
  }

  return { syncChanges, enqueueKeys };
}
