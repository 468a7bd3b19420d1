/**
 * A rewrite step's work before the swap (docs/architecture.md §10, "Rewrite"): the shadow
 * built with the new shape, the copy through the expressions, the sync from the capture log, the
 * validation in one snapshot, and the clean-up that leaves the original as it was. Capture itself
 * is the online migration's (activities/capture.ts), installed on the original with the
 * rewrite's own capture id. Source and target are the same database here: the original table is
 * the source, the shadow the target.
 */
import { Context } from '@temporalio/activity';
import { ClientBase, PoolClient } from 'pg';
import { checksumSql, ColumnMapping, copyBatchSql, rewriteCaptureId, rewriteNames, RewriteNames, rewriteTag, RewriteKey, syncBatchSql } from '../src/change/rewrite-sql';
import { expressionRefusal } from '../src/change/statements';
import { RewriteStep } from '../src/core/change-plan';
import { FAILURE } from '../src/core/failure-types';
import { displayQualified, QualifiedName, quoteQualified } from '../src/core/identifiers';
import { captureNames, triggerNames } from '../src/db/capture-sql';
import { inTransaction } from '../src/db/connections';
import { refusal } from '../src/db/errors';
import { alterClauseRefusal, buildShadow, inspectOriginal } from '../src/db/rewrite-catalog';
import { ActivityDeps } from './deps';

export interface RewriteRef {
  changeId: string;
  database: string;
  step: number;
  table: QualifiedName;
}

export interface PreparedRewrite {
  mapping: ColumnMapping[];
  key: RewriteKey;
  shadow: QualifiedName;
  /** Foreign keys of the shadow added NOT VALID, validated once the copy is in. */
  foreignKeys: string[];
}

export interface RewriteDataInput extends RewriteRef {
  mapping: ColumnMapping[];
  key: RewriteKey;
}

export interface CopyRewriteInput extends RewriteDataInput {
  batchRows: number;
  /** 0 or absent: no cap. */
  rowsPerSecond?: number;
}

/** Everything that stops the step, each naming its object (preflight and the step's own start). */
export async function rewriteProblems(db: ClientBase, changeId: string, step: RewriteStep, commit: boolean): Promise<{ problems: string[]; prepared?: PreparedRewrite }> {
  const problems = await textProblems(step);
  if (problems.length) return { problems };
  const names = rewriteNames(step.table, rewriteTag(changeId, step.index));
  const captureId = rewriteCaptureId(changeId, step.index);
  const own = Object.values(triggerNames(captureId));
  const inspected = await inspectOriginal(db, step.table, own);
  if (!inspected.original || inspected.problems.length) return { problems: inspected.problems.map((p) => `: ${p}`) };
  const original = inspected.original;
  await db.query('BEGIN');
  try {
    await db.query("SET LOCAL lock_timeout = '2s'");
    await db.query(`DROP TABLE IF EXISTS ${quoteQualified(names.shadow)}`);
    const built = await buildShadow(db, step.table, names, original, step.alter, step.columns);
    problems.push(...built.problems);
    if (!problems.length) problems.push(...(await expressionProblems(db, step, names, built, captureId)));
    problems.push(...(await lostColumnProblems(db, original.relid, built.mapping)));
    const prepared: PreparedRewrite = { mapping: built.mapping, key: built.key, shadow: names.shadow, foreignKeys: original.outgoingForeignKeys.map((f) => f.name) };
    await db.query(commit && !problems.length ? 'COMMIT' : 'ROLLBACK');
    return { problems, prepared };
  } catch (err) {
    await db.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/** What the step's own text refuses, before the database is asked: alter clauses and column expressions. */
async function textProblems(step: RewriteStep): Promise<string[]> {
  const problems: string[] = [];
  for (const [i, clause] of step.alter.entries()) {
    const why = await alterClauseRefusal(clause);
    if (why) problems.push(`.alter[${i}]: ${why}`);
  }
  for (const c of step.columns) {
    const why = await expressionRefusal(c.expression, 'value');
    if (why) problems.push(`.columns.${c.column}: ${why}`);
  }
  return problems;
}

/** The expressions over the original's columns, into the new columns: the copy and the checksum run on no rows. */
async function expressionProblems(
  db: ClientBase,
  step: RewriteStep,
  names: RewriteNames,
  built: { mapping: ColumnMapping[]; key: RewriteKey },
  captureId: string,
): Promise<string[]> {
  await db.query('SAVEPOINT ferry_expressions');
  try {
    const sql = copyBatchSql(step.table, names.shadow, built.mapping, built.key, true);
    await db.query(sql, [0]);
    await db.query(checksumSql(step.table, names.shadow, captureNames(captureId, 0).log, built.mapping, built.key).original.replace(/ WHERE NOT EXISTS .*$/s, ' WHERE false'));
    await db.query('RELEASE SAVEPOINT ferry_expressions');
    return [];
  } catch (err) {
    await db.query('ROLLBACK TO SAVEPOINT ferry_expressions');
    return [`.columns: the copy's expressions do not work on ${displayQualified(step.table)}: ${(err as Error).message}`];
  }
}

/** Views and other tables' foreign keys that use a column the new table has not got: they could not follow it at the swap. */
async function lostColumnProblems(db: ClientBase, relid: number, mapping: ColumnMapping[]): Promise<string[]> {
  const problems: string[] = [];
  const shadowColumns = new Set(mapping.map((m) => m.column));
  const views = await db.query(
    `SELECT v.oid::regclass::text AS name, array_agg(DISTINCT a.attname::text) AS columns
       FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid JOIN pg_catalog.pg_class v ON v.oid = r.ev_class
       JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
      WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.refobjid = $1 AND d.refobjsubid > 0 AND v.oid <> $1 GROUP BY 1`,
    [relid],
  );
  for (const v of views.rows) {
    const lost = (v.columns as string[]).filter((c) => !shadowColumns.has(c));
    if (lost.length) problems.push(`: view ${v.name} reads ${lost.join(', ')}, which the new table has not got: drop or change the view first`);
  }
  const fks = await db.query(
    `SELECT conname, conrelid::regclass::text AS child, array(SELECT attname::text FROM pg_catalog.pg_attribute WHERE attrelid = confrelid AND attnum = ANY (confkey)) AS columns
       FROM pg_catalog.pg_constraint WHERE contype = 'f' AND confrelid = $1 AND conrelid <> $1`,
    [relid],
  );
  for (const f of fks.rows) {
    const lost = (f.columns as string[]).filter((c) => !shadowColumns.has(c));
    if (lost.length) problems.push(`: foreign key ${f.conname} of ${f.child} references ${lost.join(', ')}, which the new table has not got`);
  }
  return problems;
}

export function createRewriteActivities({ connections, logger }: ActivityDeps) {
  /** Builds the shadow (dropping one a killed attempt left: nothing has been copied yet). */
  async function prepareRewrite({ changeId, database, step }: { changeId: string; database: string; step: RewriteStep }): Promise<PreparedRewrite> {
    return connections.withClient(database, async (db) => {
      const { problems, prepared } = await rewriteProblems(db, changeId, step, true);
      if (problems.length || !prepared) {
        throw refusal(FAILURE.ChangeRefused, `the rewrite of ${displayQualified(step.table)} cannot run:\n${problems.map((p) => `  steps[${step.index}]${p}`).join('\n')}`);
      }
      logger.info({ changeId, step: step.index, shadow: prepared.shadow }, 'rewrite shadow built');
      return prepared;
    });
  }

  /**
   * The copy: keyset batches through the expressions, each its own transaction, resumed after a
   * retry from the last key heartbeated (a batch committed but not heartbeated is skipped by ON
   * CONFLICT DO NOTHING). It runs before any sync: every change since capture began is in the
   * log, applied afterwards from the original's current rows.
   */
  async function copyRewrite(input: CopyRewriteInput): Promise<{ rows: number }> {
    const ctx = Context.current();
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const resumed = ctx.info.heartbeatDetails as { lastKey: string[] | null; rows: number } | undefined;
    let lastKey = resumed?.lastKey ?? null;
    let rows = resumed?.rows ?? 0;
    const started = Date.now();
    const copiedBefore = rows;
    return connections.withClient(input.database, async (db) => {
      // The planner's estimate, for `ferry status` (read from the heartbeat, as a backfill's rows).
      const estimate = await db.query('SELECT greatest(reltuples, 0)::int8 AS n FROM pg_catalog.pg_class WHERE oid = $1::regclass', [quoteQualified(input.table)]);
      const total = Number(estimate.rows[0]?.n ?? 0);
      for (;;) {
        if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
        const sql = copyBatchSql(input.table, names.shadow, input.mapping, input.key, lastKey === null);
        const { rows: out } = await db.query(sql, lastKey === null ? [input.batchRows] : [input.batchRows, ...lastKey]);
        if (out[0].read === 0) break;
        lastKey = out[0].last_key;
        rows += out[0].read;
        ctx.heartbeat({ lastKey, rows, total: Math.max(total, rows) });
        if (input.rowsPerSecond) {
          // Heartbeats go on while the rate cap holds the copy back (its own carry the resume point).
          for (;;) {
            const due = ((rows - copiedBefore) / input.rowsPerSecond) * 1000 - (Date.now() - started);
            if (due <= 0) break;
            await ctx.sleep(Math.min(due, 2_000));
            ctx.heartbeat({ lastKey, rows, total: Math.max(total, rows) });
          }
        }
      }
      // Statistics before the swap: the new table must not meet the application's queries unplanned.
      await db.query(`ANALYZE ${quoteQualified(names.shadow)}`);
      logger.info({ changeId: input.changeId, step: input.step, rows }, 'rewrite copy done');
      return { rows };
    });
  }

  /** Applies up to `maxRows` logged changes in batches; returns how many and what is left. */
  async function syncRewrite(input: RewriteDataInput & { maxRows: number }): Promise<{ applied: number; left: number }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const log = captureNames(rewriteCaptureId(input.changeId, input.step), 0).log;
    return connections.withClient(input.database, async (db) => {
      // A heartbeat before the first batch and after each: a round of a large backlog, or one
      // waiting for a lock, shows it is alive, and a lost worker is noticed within the timeout.
      Context.current().heartbeat({ applied: 0 });
      const applied = await applyLog(db, syncBatchSql(input.table, names.shadow, log, input.mapping, input.key), log, input.maxRows, true, (n) => Context.current().heartbeat({ applied: n }));
      const left = Number((await db.query(`SELECT count(*) AS n FROM ${quoteQualified(log)}`)).rows[0].n);
      Context.current().heartbeat({ applied, left });
      return { applied, left };
    });
  }

  /** Count and checksum of the transformed original and of the shadow, in one snapshot. */
  async function validateRewrite(input: RewriteDataInput): Promise<{ rows: number; checksum: string }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const log = captureNames(rewriteCaptureId(input.changeId, input.step), 0).log;
    const sql = checksumSql(input.table, names.shadow, log, input.mapping, input.key);
    return connections.withClient(input.database, async (db) => {
      await db.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      try {
        const a = (await db.query(sql.original)).rows[0];
        Context.current().heartbeat();
        const b = (await db.query(sql.shadow)).rows[0];
        await db.query('COMMIT');
        if (a.rows !== b.rows || a.checksum !== b.checksum) {
          throw refusal(
            FAILURE.ConsistencyBreach,
            `the shadow of ${displayQualified(input.table)} differs from the original through the expressions: ${a.rows} rows (checksum ${a.checksum}) against ${b.rows} (checksum ${b.checksum})`,
          );
        }
        return { rows: Number(a.rows), checksum: a.checksum };
      } catch (err) {
        await db.query('ROLLBACK').catch(() => undefined);
        throw err;
      }
    });
  }

  /** VALIDATE of the shadow's own foreign keys, added NOT VALID (takes no lock writers wait for). */
  async function validateShadowForeignKeys(input: RewriteRef & { foreignKeys: string[]; table: QualifiedName }): Promise<void> {
    await connections.withClient(input.database, async (db) => {
      for (const fk of input.foreignKeys) {
        await db.query(`ALTER TABLE ${quoteQualified(input.table)} VALIDATE CONSTRAINT ${db.escapeIdentifier(fk)}`);
        Context.current().heartbeat();
      }
    });
  }

  /** The undo before the swap: the shadow goes; the original is not touched. Idempotent. */
  /** Drops the shadow if it is there (before the swap); returns its name when it was. */
  async function dropRewriteShadow(input: RewriteRef): Promise<{ dropped: string | null }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const present = await connections.withClient(input.database, async (db) =>
      inTransaction(db, async () => {
        await db.query("SET LOCAL lock_timeout = '5s'");
        const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(names.shadow)]);
        await db.query(`DROP TABLE IF EXISTS ${quoteQualified(names.shadow)}`);
        return rows[0].present as boolean;
      }),
    );
    logger.info({ changeId: input.changeId, step: input.step, present }, 'rewrite shadow dropped');
    return { dropped: present ? displayQualified(names.shadow) : null };
  }

  return { prepareRewrite, copyRewrite, syncRewrite, validateRewrite, validateShadowForeignKeys, dropRewriteShadow };
}

/**
 * Applies logged changes to the shadow, batch by batch, each batch one transaction unless the
 * caller holds one open (the swap drains inside its own). Returns the rows applied.
 */
export async function applyLog(
  db: PoolClient,
  statements: string[],
  log: QualifiedName,
  maxRows: number,
  ownTransaction = true,
  /** Called after each batch with the rows applied so far. */
  onBatch?: (applied: number) => void,
): Promise<number> {
  let applied = 0;
  while (applied < maxRows) {
    const batch = async () => {
      const { rows } = await db.query(`SELECT id FROM ${quoteQualified(log)} ORDER BY id LIMIT 5000`);
      if (!rows.length) return 0;
      const ids = rows.map((r) => r.id);
      for (const sql of statements) await db.query(sql, [ids]);
      return ids.length;
    };
    const n = ownTransaction ? await inTransaction(db, batch) : await batch();
    if (n === 0) break;
    applied += n;
    onBatch?.(applied);
  }
  return applied;
}
