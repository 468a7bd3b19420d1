/**
 * A rewrite step's data path that more than one activity runs: the rolled-back rehearsal that
 * preflight and the prepare step share (rewriteProblems), and applying the change log to the
 * shadow (applyLog), which the sync and the swap's drain share; and their inputs.
 */
import { ClientBase, PoolClient } from 'pg';
import { checksumSql, ColumnMapping, copyBatchSql, rewriteCaptureId, rewriteNames, RewriteNames, rewriteTag, RewriteKey } from '../change/rewrite-sql';
import { expressionRefusal } from '../change/statements';
import { RewriteStep } from '../core/change-plan';
import { displayQualified, QualifiedName, quoteQualified } from '../core/identifiers';
import { captureNames, triggerNames } from './capture-sql';
import { inTransaction } from './connections';
import { alterClauseRefusal, buildShadow, inspectOriginal } from './rewrite-catalog';

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
