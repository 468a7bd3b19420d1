/**
 * A backfill step's work: keyset batches over the table's primary key, each batch's UPDATE and
 * its pass checkpoint in ONE transaction under the pass's fence — a worker killed mid-batch
 * leaves neither, a retry resumes after the last committed batch, and no batch is applied
 * twice. backfillSlice returns after about `sliceMs` (or at once when the database is too busy)
 * so the workflow can pause, throttle or wait between slices.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { ClientBase } from 'pg';
import type { BackfillStep } from '../src/core/change-plan';
import { FAILURE, SQLSTATE } from '../src/core/failure-types';
import { displayQualified, quoteIdent, quoteQualified } from '../src/core/identifiers';
import { Key, KeyColumn } from '../src/core/plan';
import { backfillExpressionProblems } from '../src/change/statements';
import { advancePass, claimPass, holdsPass, PassRef } from '../src/db/change-bookkeeping';
import { inTransaction } from '../src/db/connections';
import { refusal, sqlState } from '../src/db/errors';
import { fenceToken } from '../src/db/fenced';
import { keyAsText, keyOrder, keyPredicate, KeyShape, ParamBinder } from '../src/db/ranges';
import { ActivityDeps } from './deps';

/** How long a batch waits for a row lock (while it holds the rows it has locked already). */
export const BATCH_LOCK_TIMEOUT_MS = 1_000;

export interface BackfillSliceInput extends PassRef {
  database: string;
  backfill: Pick<BackfillStep, 'table' | 'set' | 'where' | 'batchRows'>;
  /** Grows with every dispatch of this pass; with the attempt number it forms the fence token. */
  fence: number;
  sliceMs: number;
  rowsPerSecond?: number;
  batchRows?: number;
  maxReplicaLagMs?: number;
  maxActiveSessions?: number;
}

export interface BackfillSliceResult {
  /** This slice's rows. */
  updated: number;
  scanned: number;
  /** The pass's totals, as committed. */
  passUpdated: number;
  passScanned: number;
  /** The pass reached the end of the key range. */
  done: boolean;
  /** Why the slice stopped early and the workflow should wait before the next one. */
  waiting?: string;
}

export interface BackfillTarget {
  rowsEstimated: number;
  keyColumns: string[];
}

/** The primary key's columns and types, from the catalog. */
async function keyShape(db: ClientBase, step: Pick<BackfillStep, 'table'>): Promise<KeyShape> {
  const { rows } = await db.query<{ name: string; type: string; collatable: boolean }>(
    `SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type, a.attcollation <> 0 AS collatable
       FROM pg_catalog.pg_index i
       JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
       JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
      WHERE i.indrelid = to_regclass($1) AND i.indisprimary
      ORDER BY k.n`,
    [quoteQualified(step.table)],
  );
  if (rows.length === 0) {
    throw ApplicationFailure.nonRetryable(`${displayQualified(step.table)} has no primary key (or does not exist); a backfill walks the primary key`, FAILURE.NoPrimaryKey);
  }
  const keyColumns: KeyColumn[] = rows.map((r) => ({ name: r.name, type: r.type, collatable: r.collatable }));
  // Key order by the column's own collation: the index's order, so each batch is an index range.
  return { keyColumns, keyCollateC: false };
}

/** Why the database is too busy for the next batch, or undefined. */
async function loadReason(db: ClientBase, input: BackfillSliceInput): Promise<string | undefined> {
  if (input.maxReplicaLagMs !== undefined) {
    // Without pg_monitor (or superuser) the lag columns read as NULL: no lag is then seen.
    const { rows } = await db.query<{ ms: number | null }>(
      `SELECT (max(extract(epoch FROM replay_lag)) * 1000)::float8 AS ms FROM pg_catalog.pg_stat_replication`,
    );
    const lag = rows[0]?.ms ?? 0;
    if (lag > input.maxReplicaLagMs) return `replica replay lag ${Math.round(lag)} ms > maxReplicaLag ${input.maxReplicaLagMs} ms`;
  }
  if (input.maxActiveSessions !== undefined) {
    const { rows } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity
        WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_catalog.pg_backend_pid()`,
    );
    const active = rows[0]?.n ?? 0;
    if (active > input.maxActiveSessions) return `${active} active sessions > maxActiveSessions ${input.maxActiveSessions}`;
  }
  return undefined;
}

/**
 * One batch: the next `batchRows` keys after the checkpoint, the rows among them that match
 * `where` updated, the last key of the range returned. The range is taken by key alone, so
 * every batch advances even when few of its rows need the update. The update finds the batch's
 * rows by `IN (SELECT … FROM b)`, not by joining b: b's columns share the key's names, and the
 * plan's expressions and condition name the table's columns unqualified (`'B-' || id` would be
 * ambiguous against a join); it also plans as a nested loop over the key's index at any batch
 * size, where the join turned into a hash join over the whole table at 100,000 rows.
 */
function batchSql(input: BackfillSliceInput, shape: KeyShape, lastKey: Key | null, batchRows: number): { text: string; params: unknown[] } {
  const binder = new ParamBinder();
  const after = lastKey ? keyPredicate(shape, [{ op: '>', key: lastKey }], binder) : 'TRUE';
  const table = quoteQualified(input.backfill.table);
  const cols = shape.keyColumns.map((c) => quoteIdent(c.name));
  const set = input.backfill.set.map((s) => `${quoteIdent(s.column)} = (${s.expression})`).join(', ');
  const where = input.backfill.where ? ` AND (${input.backfill.where})` : '';
  const last = `(SELECT ARRAY[${shape.keyColumns.map((_, i) => `k${i}`).join(', ')}] FROM keys ORDER BY ${shape.keyColumns.map((_, i) => `n${i} DESC`).join(', ')} LIMIT 1)`;
  return {
    text: `WITH b AS MATERIALIZED (SELECT ${cols.join(', ')} FROM ${table} WHERE ${after} ORDER BY ${keyOrder(shape)} LIMIT ${batchRows}),
               keys AS (SELECT ${keyAsText(shape)}, ${cols.map((c, i) => `${c} AS n${i}`).join(', ')} FROM b),
               u AS (UPDATE ${table} SET ${set} WHERE (${cols.join(', ')}) IN (SELECT ${cols.join(', ')} FROM b)${where} RETURNING 1)
          SELECT (SELECT count(*) FROM b)::int AS scanned, (SELECT count(*) FROM u)::int AS updated, ${last} AS last_key`,
    params: binder.params,
  };
}

export function createBackfillActivities({ connections, logger }: ActivityDeps) {
  /** What a backfill step starts from: the table's size (for progress) and its key. */
  async function prepareBackfill(input: { database: string; backfill: Pick<BackfillStep, 'table'> }): Promise<BackfillTarget> {
    return connections.withClient(input.database, async (db) => {
      const shape = await keyShape(db, input.backfill);
      const { rows } = await db.query<{ n: number }>(`SELECT greatest(reltuples, 0)::float8 AS n FROM pg_catalog.pg_class WHERE oid = to_regclass($1)`, [
        quoteQualified(input.backfill.table),
      ]);
      return { rowsEstimated: Math.round(rows[0]?.n ?? 0), keyColumns: shape.keyColumns.map((k) => k.name) };
    });
  }

  async function backfillSlice(input: BackfillSliceInput): Promise<BackfillSliceResult> {
    const ctx = Context.current();
    const started = Date.now();
    const token = fenceToken(input.fence, ctx.info.attempt);
    const batchRows = input.batchRows ?? input.backfill.batchRows;
    const db = await connections.client(input.database, { statementTimeoutMs: 10 * 60_000, lockTimeoutMs: 30_000 });
    let details: Record<string, unknown> = { pass: input.pass };
    // Heartbeats on a timer as well: a batch that waits on a row lock must not look like a dead worker.
    const beat = setInterval(() => ctx.heartbeat(details), 2_000);
    try {
      const shape = await keyShape(db, input.backfill);
      const claimed = await claimPass(db, input, token, `${ctx.info.activityId}#${ctx.info.attempt}`);
      if (!claimed) throw superseded(input);
      let { lastKey } = claimed;
      let passUpdated = claimed.rowsUpdated;
      let passScanned = claimed.rowsScanned;
      let done = claimed.done;
      let updated = 0;
      let scanned = 0;
      let batches = 0;
      details = { pass: input.pass, rowsUpdated: passUpdated, rowsScanned: passScanned };
      ctx.heartbeat(details);
      await refuseUnjudgedExpressions(input);
      // Halved after a batch whose row locks were not all granted in time, doubled back after
      // one that was: a batch waits at most BATCH_LOCK_TIMEOUT_MS while it holds the rows it has
      // locked already, so a writer queued behind one of them waits no longer than that.
      let size = batchRows;
      while (!done && (batches === 0 || Date.now() - started < input.sliceMs)) {
        if (ctx.cancellationSignal.aborted) throw new CancelledFailure('backfill slice cancelled');
        const busy = await loadReason(db, input);
        if (busy) return { updated, scanned, passUpdated, passScanned, done, waiting: busy };
        const batch = await updateBatch(db, input, token, batchSql(input, shape, lastKey, size), size);
        if (batch === 'locked' && size > 1) {
          size = Math.max(1, Math.floor(size / 2));
          continue;
        }
        if (batch === 'locked') return { updated, scanned, passUpdated, passScanned, done, waiting: rowLocked(input) };
        size = Math.min(batchRows, size * 2);
        batches += 1;
        updated += batch.updated;
        scanned += batch.scanned;
        passUpdated += batch.updated;
        passScanned += batch.scanned;
        lastKey = batch.last_key ?? lastKey;
        done = batch.end;
        details = { pass: input.pass, rowsUpdated: passUpdated, rowsScanned: passScanned };
        ctx.heartbeat(details);
        if (input.rowsPerSecond && !done) {
          const due = (scanned / input.rowsPerSecond) * 1000 - (Date.now() - started);
          if (due > 0) await ctx.sleep(Math.min(due, input.sliceMs));
        }
      }
      logger.info({ changeId: input.changeId, step: input.step, pass: input.pass, updated, scanned, batches, done }, 'backfill slice');
      return { updated, scanned, passUpdated, passScanned, done };
    } finally {
      clearInterval(beat);
      await db.end().catch(() => undefined);
    }
  }

  return { prepareBackfill, backfillSlice };
}

/**
 * The plan's expressions judged again where they run, as preflight judged them: the slice's input
 * is whatever started the workflow, and an expression is embedded only when it is the one it
 * claims to be.
 */
async function refuseUnjudgedExpressions(input: BackfillSliceInput): Promise<void> {
  const [refused] = await backfillExpressionProblems(input.backfill);
  if (refused) throw refusal(FAILURE.ChangeRefused, `backfill.${refused}`);
}

interface BatchDone {
  scanned: number;
  updated: number;
  last_key: string[] | null;
  /** Fewer rows than asked for: the pass has reached the table's end. */
  end: boolean;
}

/**
 * One batch in one transaction, while the pass is still this attempt's: its rows updated and the
 * pass advanced together. 'locked': a row lock was not granted within BATCH_LOCK_TIMEOUT_MS.
 */
async function updateBatch(db: ClientBase, input: BackfillSliceInput, token: number, sql: { text: string; params: unknown[] }, size: number): Promise<BatchDone | 'locked'> {
  try {
    return await inTransaction(db, async () => {
      if (!(await holdsPass(db, input, token))) throw superseded(input);
      await db.query(`SET LOCAL lock_timeout = '${BATCH_LOCK_TIMEOUT_MS}ms'`);
      const { rows } = await db.query<{ scanned: number; updated: number; last_key: string[] | null }>(sql.text, sql.params);
      const r = rows[0];
      const end = r.scanned < size;
      await advancePass(db, input, r.last_key, r.updated, r.scanned, end);
      return { ...r, end };
    });
  } catch (err) {
    if (sqlState(err) === SQLSTATE.lockNotAvailable) return 'locked';
    throw err;
  }
}

function rowLocked(input: BackfillSliceInput): string {
  return `a row of ${displayQualified(input.backfill.table)} is locked by another session (the next batch waits for it)`;
}

function superseded(ref: PassRef): ApplicationFailure {
  return ApplicationFailure.nonRetryable(`pass ${ref.pass} of step ${ref.step} is owned by a newer attempt; this one stops without writing`, FAILURE.Superseded);
}
