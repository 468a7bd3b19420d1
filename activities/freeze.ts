/**
 * The cutover's freeze on the source, without a lock race. Capture installs the freeze
 * trigger, inactive; the cutover then:
 *   setFreeze('frozen')  — flips the freeze state (a sequence: no lock, seen by every statement
 *                          at once whatever its snapshot), so every new write is refused;
 *   awaitWriters         — waits until each transaction that held a write lock on a migrated
 *                          table when the freeze began has ended, so its changes are in the log
 *                          before the final drain; names the sessions it waits for, and ends
 *                          them when asked (pg_terminate_backend);
 *   setFreeze('moved')   — after the point of no return (keep-frozen), or 'released'/'open'.
 * unfreezeSource lifts a freeze after the migration, for this Ferry's freeze and for the
 * trigger-only freeze of an older one; freezeSource is that older freeze, kept for executions
 * an older Ferry began.
 */
import { Context } from '@temporalio/activity';
import { ClientBase, PoolClient } from 'pg';
import {
  createFreezeFunctionSql,
  createFreezeTriggerSql,
  FREEZE_SCHEMA,
  FREEZE_STATE,
  FreezeState,
  freezeStateSequence,
  GUARD_BYPASS,
  readFreezeState,
  triggerNames,
} from '../src/db/capture-sql';
import { inTransaction } from '../src/db/connections';
import { refusal } from '../src/db/errors';
import { QualifiedName, quoteQualified } from '../src/core/identifiers';
import type { Blocker } from '../src/core/status';
import { relationTree, relationTrees } from '../src/db/triggers';
import type { CaptureInput, SourceRef } from '../src/core/capture-input';
import { removeFreeze } from '../src/db/freeze';
import { ActivityDeps } from './deps';
import { FAILURE } from '../src/core/failure-types';

export interface SetFreezeInput extends SourceRef {
  state: FreezeState;
}

export interface AwaitWritersInput extends SourceRef {
  tables: QualifiedName[];
  /** When the freeze began (source clock): transactions begun later could not write. */
  frozenAt: string;
  /** Return after this long with the sessions still waited for. */
  sliceMs: number;
  /** End the waited-for sessions with pg_terminate_backend (cutover.onBlocked: terminate). */
  terminate?: boolean;
}

export interface AwaitWritersResult {
  blockers: Blocker[];
  /** Sessions this call ended. */
  terminated: number[];
}

const POLL_MS = 200;

/**
 * Transactions holding a lock that lets them write a migrated table, begun before the freeze:
 * only they can still commit changes the log has not shown yet. One shown as failed (`idle in
 * transaction (aborted)`) is waited for too: PostgreSQL shows the same state when only a
 * savepoint failed, and such a session can roll back to the savepoint and commit what it wrote
 * before it. A prepared transaction has no session but may commit.
 * A session with track_activities off shows no transaction start: it is waited for, as its
 * start is unknown. A lock whose session is missing from the activity view this query read
 * (that view is read once, the locks live) belongs to a session that connected after the view
 * was read, so after the freeze, or one that has ended: neither is waited for.
 */
const WRITERS_SQL = `
SELECT DISTINCT ON (l.virtualtransaction)
       coalesce(a.pid, 0) AS pid, coalesce(a.application_name, '') AS application_name,
       coalesce(a.usename::text, p.owner::text, '') AS usename,
       coalesce(extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, p.prepared))::float8, 0) AS age,
       CASE WHEN p.gid IS NOT NULL THEN left('PREPARED TRANSACTION ' || p.gid, 100)
            WHEN a.xact_start IS NULL THEN '(track_activities is off in this session: its query and transaction start are not shown)'
            ELSE left(coalesce(a.query, ''), 100) END AS query,
       coalesce(a.state, 'prepared') AS state
  FROM pg_catalog.pg_locks l
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
  -- A prepared transaction keeps its virtual transaction id in pg_locks, beside its xid's lock.
  LEFT JOIN pg_catalog.pg_prepared_xacts p ON l.pid IS NULL AND p.transaction IN (
       SELECT x.transactionid FROM pg_catalog.pg_locks x
        WHERE x.locktype = 'transactionid' AND x.pid IS NULL AND x.virtualtransaction = l.virtualtransaction)
 WHERE l.locktype = 'relation' AND l.granted
   AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND l.relation = ANY ($1::oid[])
   AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
   AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
   AND ((l.pid IS NULL AND p.gid IS NOT NULL)
        OR (a.pid IS NOT NULL AND (a.xact_start IS NULL OR a.xact_start < $2::timestamptz)))
 ORDER BY l.virtualtransaction`;

/** The transactions that may still commit changes to `relids` the log has not shown (WRITERS_SQL). */
export async function writersBegunBefore(db: ClientBase, relids: number[], frozenAt: string): Promise<Blocker[]> {
  return (await db.query(WRITERS_SQL, [relids, frozenAt])).rows.map(
    (r): Blocker => ({
      pid: Number(r.pid),
      applicationName: r.application_name,
      user: r.usename,
      xactAgeSeconds: Math.round(Number(r.age) * 10) / 10,
      query: r.query,
      state: r.state,
    }),
  );
}

export function createFreezeActivities({ connections, logger }: ActivityDeps) {
  async function setFreeze(input: SetFreezeInput): Promise<{ at: string; applied: boolean }> {
    return await connections.withClient(input.source, async (db) => {
      const seq = quoteQualified(freezeStateSequence(input.migrationId));
      if ((await readFreezeState(db, input.migrationId)) === 'absent') {
        // Nothing to lift (never installed, or already removed); freezing without it is a bug.
        if (input.state === 'frozen' || input.state === 'moved') {
          throw refusal(FAILURE.FreezeMissing, `the freeze of migration ${input.migrationId} is not installed on the source (was capture removed?)`);
        }
        return { at: await now(db), applied: false };
      }
      // setval is not transactional: the new state holds for every session from here on.
      const { rows } = await db.query(
        `SELECT pg_catalog.setval($1::regclass, $2, true), to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at`,
        [seq, FREEZE_STATE[input.state]],
      );
      logger.info({ migrationId: input.migrationId, state: input.state }, 'freeze state set');
      return { at: rows[0].at, applied: true };
    });
  }

  async function awaitWriters(input: AwaitWritersInput): Promise<AwaitWritersResult> {
    const ctx = Context.current();
    const started = Date.now();
    const terminated: number[] = [];
    return await connections.withClient(input.source, async (db) => {
      // The tables and their partitions in one statement: inside the write outage, two round
      // trips a table took a second at 200 tables.
      const relids = await relationTrees(db, input.tables.map(quoteQualified));
      let first: string | undefined;
      for (;;) {
        const blockers = await writersBegunBefore(db, relids, input.frozenAt);
        if (blockers.length === 0) return { blockers, terminated };
        if (input.terminate) {
          for (const b of blockers.filter((x) => x.pid > 0 && !terminated.includes(x.pid))) {
            const { rows } = await db.query('SELECT pg_catalog.pg_terminate_backend($1) AS ok', [b.pid]);
            if (rows[0].ok) terminated.push(b.pid);
            logger.warn({ migrationId: input.migrationId, blocker: b, terminated: rows[0].ok }, 'cutover ended a blocking session');
          }
        }
        ctx.heartbeat({ blockers });
        // Back to the workflow when the slice is over, or as soon as one of them has ended
        // (the status then names who is left).
        const now = blockers.map((b) => b.pid).join(',');
        first ??= now;
        if (Date.now() - started >= input.sliceMs || now !== first) return { blockers, terminated };
        await ctx.sleep(POLL_MS);
      }
    });
  }

  /**
   * `ferry unfreeze`: writes pass again at once (the freeze state, no lock), then the freeze
   * triggers go where their table's lock is free; the rest is reported as pending.
   */
  async function unfreezeSource({ migrationId, source }: SourceRef): Promise<{ unfrozen: string[]; pending: string[] }> {
    return await connections.withClient(source, async (db) => {
      const trigger = triggerNames(migrationId).freeze;
      const { rows } = await db.query('SELECT tgrelid::regclass::text AS relation FROM pg_catalog.pg_trigger WHERE tgname = $1 ORDER BY oid', [trigger]);
      const seq = quoteQualified(freezeStateSequence(migrationId));
      if ((await readFreezeState(db, migrationId)) !== 'absent') await db.query('SELECT pg_catalog.setval($1::regclass, $2, true)', [seq, FREEZE_STATE.released]);
      const { pending } = await removeFreeze(db, migrationId);
      logger.info({ migrationId, tables: rows.length, pending }, 'source unfrozen');
      return { unfrozen: rows.map((r) => r.relation as string), pending };
    });
  }

  /** The freeze of an older Ferry: created at cutover by CREATE TRIGGER (a lock race). */
  async function freezeSource(input: CaptureInput): Promise<{ frozenAt: string }> {
    return await connections.withClient(input.source, (db) =>
      inTransaction(db, async () => {
        await db.query("SET LOCAL lock_timeout = '2s'");
        await db.query(GUARD_BYPASS);
        await db.query(`CREATE SCHEMA IF NOT EXISTS ${FREEZE_SCHEMA}`);
        await db.query(createFreezeFunctionSql(input.migrationId));
        const trigger = triggerNames(input.migrationId).freeze;
        for (const table of input.tables) {
          const rel = await db.query('SELECT to_regclass($1)::oid::int8 AS relid', [quoteQualified(table.source)]);
          if (!rel.rows[0].relid) continue;
          // A statement trigger: each partition needs its own, as with the armed freeze.
          for (const { relid, name } of await relationTree(db, Number(rel.rows[0].relid))) {
            const exists = await db.query('SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = $1 AND tgname = $2', [relid, trigger]);
            if (exists.rowCount) continue;
            for (const sql of createFreezeTriggerSql(name, input.migrationId)) await db.query(sql);
          }
        }
        logger.info({ migrationId: input.migrationId }, 'source frozen');
        return { frozenAt: await now(db) };
      }),
    );
  }

  return { setFreeze, awaitWriters, unfreezeSource, freezeSource };
}

async function now(db: PoolClient): Promise<string> {
  const { rows } = await db.query(`SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at`);
  return rows[0].at;
}
