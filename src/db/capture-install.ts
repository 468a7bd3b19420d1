/**
 * Capture installed on a source's tables, in the caller's transaction: the change logs, the
 * capture triggers (or the publication and slot), the TRUNCATE refusal, the armed freeze and the
 * DDL guard. A migration's installCapture runs it; so does a rewrite's swap, for the revert's
 * capture on the new table.
 */
import { PoolClient } from 'pg';
import {
  CAPTURE_BOOKKEEPING,
  CAPTURE_SCHEMA,
  captureNames,
  createArmedFreezeFunctionSql,
  createArmedFreezeTriggerSql,
  createCaptureFunctionSql,
  createCaptureTriggerSql,
  createFreezeStateSql,
  createGuardSql,
  createLogSql,
  createRefuseTruncateSql,
  createRefuseTruncateTriggerSql,
  createRowFreezeTriggerSql,
  FINGERPRINT_SQL,
  FREEZE_SCHEMA,
  PARTITIONS_SQL,
  ROW_FREEZE_SQL,
} from './capture-sql';
import { refusal, sqlState } from './errors';
import { createPublicationSql, logicalNames, SLOTS_TABLE, streamsMessages } from './logical-sql';
import { displayQualified, quoteQualified } from '../core/identifiers';
import { relationTree, relationTrees } from './triggers';
import { migrateSchema } from './schema-versions';
import type { CaptureInput, CaptureTable } from '../core/capture-input';
import { FAILURE } from '../core/failure-types';

export const LOCK_TIMEOUT = "SET LOCAL lock_timeout = '2s'";
export const CAPTURE_LOCK = 'ferry:capture';

export async function lockCapture(db: PoolClient): Promise<void> {
  await db.query('SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))', [CAPTURE_LOCK]);
}

export async function capturesExist(db: PoolClient): Promise<boolean> {
  const { rows } = await db.query(`SELECT to_regclass('${CAPTURE_SCHEMA}.captures') IS NOT NULL AS present`);
  return rows[0].present;
}

/**
 * Installs capture for `input.tables` inside the caller's transaction (its lock_timeout set): the
 * capture lock, Ferry's capture schema, then per table its log, trigger function and triggers,
 * the TRUNCATE refusal on it and its partitions, the armed freeze when asked, and the DDL guard
 * (needs superuser; with it or without, each sync slice compares the column fingerprints the
 * rows recorded). A migration whose capture is installed already is left as it is. A rewrite's swap installs
 * the revert's capture this way, with its own statements; a migration uses installCaptureInParts.
 */
export async function installCaptureIn(db: PoolClient, input: CaptureInput, { guard = true } = {}): Promise<{ ddlGuard: boolean }> {
  const installed = await beginCapture(db, input);
  if (installed.done) return { ddlGuard: installed.ddlGuard };
  const fresh: [CaptureTable, number][] = [];
  for (const table of input.tables) fresh.push([table, await captureTable(db, input, table)]);
  return { ddlGuard: await finishCapture(db, input, fresh, guard) };
}

/**
 * Installs capture as installCaptureIn does, in parts: what every table shares, then each table in
 * a transaction of its own, the last one together with the guard and the publication. A table's
 * writers wait only for its own part (CREATE TRIGGER's lock), not for the whole install, which
 * at 500 tables in one transaction held the first table's writers for seconds; and a retry
 * resumes after the parts committed (a table's row in `captures`, written in its part) instead
 * of starting over because one table's lock was taken. `transaction` runs a part (BEGIN, the
 * lock_timeout, COMMIT).
 */
export async function installCaptureInParts(
  db: PoolClient,
  input: CaptureInput,
  transaction: <T>(work: () => Promise<T>) => Promise<T>,
  { guard = true } = {},
): Promise<{ ddlGuard: boolean }> {
  const installed = await transaction(() => beginCapture(db, input));
  if (installed.done) return { ddlGuard: installed.ddlGuard };
  const todo = input.tables.filter((t) => !installed.tables.has(t.index));
  const last = todo.pop();
  for (const table of todo) {
    await transaction(async () => {
      await lockCapture(db);
      await registerTable(db, input, table, await captureTable(db, input, table), { ddlGuard: false, complete: false });
    });
  }
  const ddlGuard = await transaction(async () => {
    await lockCapture(db);
    return finishCapture(db, input, last ? [[last, await captureTable(db, input, last)]] : [], guard);
  });
  return { ddlGuard };
}

/**
 * The capture lock and the bookkeeping; then, unless the install is done already (left as it is),
 * what every table's capture uses: the TRUNCATE refusal's function, the freeze's state and function.
 */
async function beginCapture(db: PoolClient, input: CaptureInput): Promise<Installed> {
  await lockCapture(db);
  await migrateSchema(db, CAPTURE_BOOKKEEPING);
  const installed = await installedCapture(db, input);
  if (installed.done) return installed;
  await db.query(createRefuseTruncateSql(input.migrationId));
  if (input.armFreeze) {
    await db.query(`CREATE SCHEMA IF NOT EXISTS ${FREEZE_SCHEMA}`);
    await db.query(createFreezeStateSql(input.migrationId));
    await db.query(createArmedFreezeFunctionSql(input.migrationId));
  }
  return installed;
}

/** The migration's tables whose capture is in place, and whether the whole install is (every table, the last part done). */
interface Installed {
  done: boolean;
  ddlGuard: boolean;
  tables: Set<number>;
}

async function installedCapture(db: PoolClient, input: CaptureInput): Promise<Installed> {
  const { rows } = await db.query(`SELECT table_index, ddl_guard, complete FROM ${CAPTURE_SCHEMA}.captures WHERE migration_id = $1`, [input.migrationId]);
  // An install of an older Ferry wrote every row at once: `complete` is true on each (its default).
  const done = rows.length > 0 && rows.every((r) => r.complete);
  return { done, ddlGuard: rows.length > 0 && Boolean(rows[0].ddl_guard), tables: new Set(rows.map((r) => Number(r.table_index))) };
}

/**
 * The install's last statements: the DDL guard over the captured tables and their partitions,
 * the rows of `fresh` (the tables captured in this transaction, with their relids), every row
 * marked complete, and with logical capture the publication and the slot's row.
 */
async function finishCapture(db: PoolClient, input: CaptureInput, fresh: [CaptureTable, number][], guard: boolean): Promise<boolean> {
  // The tables and their partitions, for the guard and the publication (a rewrite's swap wants neither).
  const trees = guard || input.logical ? await relationTrees(db, input.tables.map((t) => quoteQualified(t.source))) : [];
  const ddlGuard = guard && (await installGuard(db, input.migrationId, trees));
  for (const [table, relid] of fresh) await registerTable(db, input, table, relid, { ddlGuard, complete: true });
  await db.query(`UPDATE ${CAPTURE_SCHEMA}.captures SET ddl_guard = $2, complete = true WHERE migration_id = $1`, [input.migrationId, ddlGuard]);
  if (input.logical) {
    const logical = logicalNames(input.migrationId);
    // Committed before the slot exists: the stream decodes with the publication in place.
    const partitioned = await db.query(`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = ANY ($1::oid[]) AND relkind = 'p') AS any`, [trees]);
    await db.query(createPublicationSql(logical, input.tables.map((t) => t.source), partitioned.rows[0].any, !(await streamsMessages(db))));
    await db.query(`INSERT INTO ${SLOTS_TABLE} (migration_id, slot, publication) VALUES ($1, $2, $3)`, [input.migrationId, logical.slot, logical.publication]);
  }
  return ddlGuard;
}

/** A captured table's row: its columns' fingerprint and partitions as they are now, which the syncs check against. */
async function registerTable(db: PoolClient, input: CaptureInput, table: CaptureTable, relid: number, state: { ddlGuard: boolean; complete: boolean }): Promise<void> {
  const fp = await db.query(FINGERPRINT_SQL, [relid]);
  const parts = await db.query(PARTITIONS_SQL, [relid]);
  await db.query(
    `INSERT INTO ${CAPTURE_SCHEMA}.captures (migration_id, table_index, relid, fingerprint, ddl_guard, partitions, complete) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
    [input.migrationId, table.index, relid, fp.rows[0].fingerprint, state.ddlGuard, parts.rows[0].partitions, state.complete],
  );
}

/** One table's log, trigger function and triggers; returns its relid. */
async function captureTable(db: PoolClient, input: CaptureInput, table: CaptureTable): Promise<number> {
  const names = captureNames(input.migrationId, table.index);
  const rel = await db.query('SELECT to_regclass($1)::oid::int8 AS relid', [quoteQualified(table.source)]);
  if (!rel.rows[0].relid) throw refusal(FAILURE.MissingTable, `table ${displayQualified(table.source)} disappeared from the source`);
  const others = await db.query(`SELECT tgname FROM pg_catalog.pg_trigger WHERE tgrelid = $1 AND tgname LIKE 'ferry\\_capture\\_%' LIMIT 1`, [rel.rows[0].relid]);
  if (others.rowCount) {
    throw refusal(
      FAILURE.AlreadyCaptured,
      `${displayQualified(table.source)} is already captured by another online migration (trigger ${others.rows[0].tgname}); finish or cancel that one first`,
    );
  }
  // Logical capture leaves no trigger on the table: its publication says it.
  const published = await db.query(
    `SELECT pubname FROM pg_catalog.pg_publication_tables WHERE pubname LIKE 'ferry\\_pub\\_%' AND pubname <> $1 AND schemaname = $2 AND tablename = $3 LIMIT 1`,
    [logicalNames(input.migrationId).publication, table.source.schema, table.source.name],
  );
  if (published.rowCount) {
    throw refusal(
      FAILURE.AlreadyCaptured,
      `${displayQualified(table.source)} is already captured by another online migration (publication ${published.rows[0].pubname}); finish or cancel that one first`,
    );
  }
  const [self, ...partitions] = await relationTree(db, Number(rel.rows[0].relid));
  await db.query(createLogSql(names, table.keyColumns.length === 0));
  if (!input.logical) {
    await db.query(createCaptureFunctionSql(names, table.keyColumns));
    for (const sql of createCaptureTriggerSql(self.name, names, input.migrationId)) await db.query(sql);
  }
  // Statement triggers fire only for statements that name their own table: a write or
  // TRUNCATE straight into a partition meets the partition's.
  for (const { name } of [self, ...partitions]) {
    for (const sql of createRefuseTruncateTriggerSql(name, input.migrationId)) await db.query(sql);
    if (input.armFreeze) for (const sql of createArmedFreezeTriggerSql(name, input.migrationId)) await db.query(sql);
  }
  if (input.armFreeze && (await db.query(ROW_FREEZE_SQL, [self.relid])).rows[0].needed) {
    // Row triggers on the tables that hold rows: a partitioned table takes none before PostgreSQL 13.
    const leaves = await db.query(`SELECT oid::regclass::text AS name FROM pg_catalog.pg_class WHERE oid = ANY ($1::oid[]) AND relkind = 'r' ORDER BY oid`, [
      [self, ...partitions].map((r) => r.relid),
    ]);
    for (const { name } of leaves.rows) for (const sql of createRowFreezeTriggerSql(name, input.migrationId)) await db.query(sql);
  }
  return Number(rel.rows[0].relid);
}

/** The DDL guard's event triggers; false when the role may not create them (not a superuser). */
async function installGuard(db: PoolClient, migrationId: string, guarded: number[]): Promise<boolean> {
  await db.query('SAVEPOINT guard');
  try {
    for (const sql of createGuardSql(migrationId, guarded)) await db.query(sql);
    await db.query('RELEASE SAVEPOINT guard');
    return true;
  } catch (err) {
    if (sqlState(err) !== '42501') throw err;
    await db.query('ROLLBACK TO SAVEPOINT guard');
    return false;
  }
}
