/**
 * An index step: CREATE [UNIQUE] INDEX CONCURRENTLY (or REINDEX INDEX CONCURRENTLY), writes going
 * on meanwhile. A build that dies — its worker killed, its statement cancelled — leaves an
 * INVALID index behind; the next attempt finds it, ends any session still building it, drops it
 * (CONCURRENTLY) and builds again. Heartbeats carry the build's progress from
 * pg_stat_progress_create_index, which `ferry status` shows.
 */
import { Context } from '@temporalio/activity';
import { Client, ClientBase } from 'pg';
import type { IndexStep } from '../src/core/change-plan';
import type { StepProgress } from '../src/core/change-status';
import { expressionRefusal } from '../src/change/statements';
import { FAILURE } from '../src/core/failure-types';
import { QualifiedName, quoteIdent, quoteQualified } from '../src/core/identifiers';
import { refusal } from '../src/db/errors';
import { indexDifference } from '../src/db/index-difference';
import { ActivityDeps } from './deps';

export interface BuildIndexInput {
  changeId: string;
  database: string;
  index: Pick<IndexStep, 'table' | 'name' | 'columns' | 'unique' | 'using' | 'where' | 'rebuild'>;
  statementTimeoutMs: number;
}

export interface BuildIndexResult {
  /** It was there and valid already: nothing was built. */
  existed: boolean;
  /** INVALID leftovers of earlier attempts that were dropped first. */
  droppedInvalid: string[];
}

interface IndexRow {
  oid: number;
  valid: boolean;
  table: number;
  name: string;
}

async function findIndexes(db: ClientBase, schema: string, names: string[], like?: string): Promise<IndexRow[]> {
  const { rows } = await db.query(
    `SELECT c.oid::int8 AS oid, i.indisvalid AS valid, i.indrelid::int8 AS table, c.relname::text AS name
       FROM pg_catalog.pg_class c
       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid
      WHERE n.nspname = $1 AND (c.relname = ANY ($2::text[]) OR ($3::text IS NOT NULL AND c.relname LIKE $3))`,
    [schema, names, like ?? null],
  );
  return rows.map((r) => ({ oid: Number(r.oid), valid: r.valid, table: Number(r.table), name: r.name }));
}

/**
 * What REINDEX INDEX CONCURRENTLY leaves when it fails or its worker dies: INVALID indexes on the
 * same table defined as `index` is (its `_ccnew` copy, or the `_ccold` one it was swapping out).
 * Found by their definition, not their names: PostgreSQL cuts a long name short to fit the suffix.
 */
async function reindexLeftovers(db: ClientBase, table: number, index: number): Promise<IndexRow[]> {
  const { rows } = await db.query(
    `SELECT c.oid::int8 AS oid, i.indisvalid AS valid, i.indrelid::int8 AS table, c.relname::text AS name
       FROM pg_catalog.pg_index t
       JOIN pg_catalog.pg_class tc ON tc.oid = t.indexrelid
       JOIN pg_catalog.pg_index i ON i.indrelid = t.indrelid AND i.indexrelid <> t.indexrelid AND NOT i.indisvalid
       JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid AND c.relam = tc.relam
      WHERE t.indexrelid = $2 AND t.indrelid = $1
        AND i.indkey = t.indkey AND i.indclass = t.indclass AND i.indcollation = t.indcollation AND i.indoption = t.indoption
        AND i.indisunique = t.indisunique
        AND pg_catalog.pg_get_expr(i.indexprs, i.indrelid) IS NOT DISTINCT FROM pg_catalog.pg_get_expr(t.indexprs, t.indrelid)
        AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) IS NOT DISTINCT FROM pg_catalog.pg_get_expr(t.indpred, t.indrelid)`,
    [table, index],
  );
  return rows.map((r) => ({ oid: Number(r.oid), valid: r.valid, table: Number(r.table), name: r.name }));
}

/** Ends sessions still building `index` (an attempt whose worker died), then drops it. */
async function dropInvalid(db: ClientBase, schema: string, index: IndexRow): Promise<void> {
  await db.query(
    `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_progress_create_index WHERE index_relid = $1 AND pid <> pg_catalog.pg_backend_pid()`,
    [index.oid],
  );
  await db.query(`DROP INDEX CONCURRENTLY IF EXISTS ${quoteIdent(schema)}.${quoteIdent(index.name)}`);
}

function createSql(index: BuildIndexInput['index']): string {
  const columns = index.columns.map(quoteIdent).join(', ');
  return (
    `CREATE ${index.unique ? 'UNIQUE ' : ''}INDEX CONCURRENTLY ${quoteIdent(index.name)} ON ${quoteQualified(index.table)} USING ${index.using} (${columns})` +
    (index.where ? ` WHERE (${index.where})` : '')
  );
}

async function progressOf(db: Pick<ClientBase, 'query'>, pid: number): Promise<StepProgress | undefined> {
  const { rows } = await db.query(
    `SELECT phase, blocks_total::int8 AS bt, blocks_done::int8 AS bd, tuples_total::int8 AS tt, tuples_done::int8 AS td
       FROM pg_catalog.pg_stat_progress_create_index WHERE pid = $1`,
    [pid],
  );
  const r = rows[0];
  if (!r) return undefined;
  if (Number(r.bt) > 0) return { done: Number(r.bd), total: Number(r.bt), unit: 'blocks', phase: r.phase };
  return { done: Number(r.td), total: Number(r.tt), unit: 'tuples', phase: r.phase };
}

export function createChangeIndexActivities({ connections, logger }: ActivityDeps) {
  async function buildChangeIndex(input: BuildIndexInput): Promise<BuildIndexResult> {
    const ctx = Context.current();
    const { schema } = input.index.table;
    // No lock_timeout: a concurrent build waits for older transactions without blocking writers.
    const db: Client = await connections.client(input.database, { statementTimeoutMs: input.statementTimeoutMs, lockTimeoutMs: 0 });
    // A build whose worker died stops within a second instead of running on unseen (PostgreSQL 14+).
    await db.query(`SET client_connection_check_interval = '1s'`).catch(() => undefined);
    const pid = Number((await db.query('SELECT pg_catalog.pg_backend_pid() AS pid')).rows[0].pid);
    const monitor = connections.pool(input.database);
    let progress: StepProgress | undefined;
    const beat = setInterval(() => {
      void progressOf(monitor, pid)
        .then((p) => {
          progress = p ?? progress;
        })
        .catch(() => undefined)
        .finally(() => ctx.heartbeat(progress ? { progress } : undefined));
    }, 2_000);
    const onCancel = () => void monitor.query('SELECT pg_catalog.pg_cancel_backend($1)', [pid]).catch(() => undefined);
    ctx.cancellationSignal.addEventListener('abort', onCancel);
    const droppedInvalid: string[] = [];
    try {
      ctx.heartbeat();
      const table = Number((await db.query('SELECT to_regclass($1)::oid::int8 AS oid', [quoteQualified(input.index.table)])).rows[0].oid);
      if (input.index.rebuild) {
        // REINDEX CONCURRENTLY builds a copy beside the index: one that failed or was killed stays INVALID.
        const [target] = await findIndexes(db, schema, [input.index.name]);
        const dropLeftovers = async () => {
          for (const leftover of target ? await reindexLeftovers(db, table, target.oid) : []) {
            await dropInvalid(db, schema, leftover);
            droppedInvalid.push(leftover.name);
          }
        };
        await dropLeftovers();
        try {
          await db.query(`REINDEX INDEX CONCURRENTLY ${quoteIdent(schema)}.${quoteIdent(input.index.name)}`);
        } catch (err) {
          // Its timeout, a cancel, a deadlock: what it built so far goes now, not at the next attempt.
          await dropLeftovers().catch((cleanup: Error) => logger.warn({ changeId: input.changeId, err: cleanup.message }, 'dropping what a failed REINDEX left failed'));
          throw err;
        }
        return { existed: false, droppedInvalid };
      }
      const [existing] = await findIndexes(db, schema, [input.index.name]);
      if (existing?.valid && existing.table === table) {
        // Done only if it is the index the step asks for: one of the same name on other columns is not.
        const other = await indexDifference(db, existing.oid, input.index);
        if (other) throw refusal(FAILURE.ChangeRefused, `index ${schema}.${input.index.name} exists with another definition (${other}): drop it, or give the step's index another name`);
        return { existed: true, droppedInvalid };
      }
      if (existing && !existing.valid && existing.table === table) {
        await dropInvalid(db, schema, existing);
        droppedInvalid.push(existing.name);
        logger.info({ changeId: input.changeId, index: existing.name }, 'dropped an INVALID index left by an earlier attempt');
      }
      // Judged again where it runs, as preflight judged it (the input is whatever started the workflow).
      const bad = input.index.where === undefined ? undefined : await expressionRefusal(input.index.where, 'condition');
      if (bad) throw refusal(FAILURE.ChangeRefused, `index.where: ${bad}`);
      await db.query(createSql(input.index));
      return { existed: false, droppedInvalid };
    } finally {
      clearInterval(beat);
      ctx.cancellationSignal.removeEventListener('abort', onCancel);
      await db.end().catch(() => undefined);
    }
  }

  /**
   * Drops the step's index (rollback), or only when INVALID (after a failed build). CONCURRENTLY,
   * so writers never wait for it. Given the step's definition, a valid index of the name that is
   * not the one the step asks for (somebody else's, made after preflight) is kept, and named.
   */
  async function dropChangeIndex(input: {
    database: string;
    table: QualifiedName;
    name: string;
    onlyInvalid: boolean;
    index?: Pick<IndexStep, 'columns' | 'unique' | 'using' | 'where'>;
  }): Promise<{ dropped: boolean; kept?: string }> {
    const db = await connections.client(input.database, { statementTimeoutMs: 10 * 60_000, lockTimeoutMs: 0 });
    try {
      const table = Number((await db.query('SELECT coalesce(to_regclass($1)::oid, 0)::int8 AS oid', [quoteQualified(input.table)])).rows[0].oid);
      const [existing] = await findIndexes(db, input.table.schema, [input.name]);
      if (!existing || existing.table !== table || (input.onlyInvalid && existing.valid)) return { dropped: false };
      const other = existing.valid && input.index ? await indexDifference(db, existing.oid, input.index) : undefined;
      if (other) return { dropped: false, kept: other };
      await dropInvalid(db, input.table.schema, existing);
      return { dropped: true };
    } finally {
      await db.end().catch(() => undefined);
    }
  }

  return { buildChangeIndex, dropChangeIndex };
}
