/**
 * Online mode on the source: installCapture (change log, row triggers, TRUNCATE refusal, the
 * armed freeze, DDL guard — all tables in one transaction, before the first row is copied; a
 * partitioned table's partitions get the statement triggers too) and releaseSource (everything
 * removed again). Locks are taken with a short lock_timeout: a CREATE TRIGGER queued behind an
 * idle transaction would otherwise stall every writer of the table, so it gives up quickly and
 * Temporal retries it. Every step is idempotent.
 */
import { PoolClient } from 'pg';
import { inTransaction } from '../src/db/connections';
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
  guardEventTriggers,
  guardFunction,
  neutralCaptureFunctionSql,
  neutralRefuseTruncateSql,
  PARTITIONS_SQL,
  refuseTruncateFunction,
  ROW_FREEZE_SQL,
  triggerNames,
} from '../src/db/capture-sql';
import { refusal, sqlState } from '../src/db/errors';
import { createPublicationSql, dropLogical, ensureSlot, logicalNames, SLOTS_TABLE } from '../src/db/logical-sql';
import { displayQualified, quoteIdent, quoteQualified } from '../src/core/identifiers';
import { dropTriggers, relationsWithTriggers, relationTree } from '../src/db/triggers';
import { dropSchemaIfEmpty, migrateSchema } from '../src/db/schema-versions';
import { ActivityDeps } from './deps';
import { removeFreeze } from '../src/db/freeze';
import type { CaptureInput, CaptureTable, SourceRef } from '../src/core/capture-input';
import { FAILURE } from '../src/core/failure-types';

export type { CaptureInput, CaptureTable, SourceRef } from '../src/core/capture-input';

export interface ReleaseInput extends SourceRef {
  /** keep: the tables stay frozen (cutover with keep-frozen); remove: nothing of Ferry stays. */
  freeze: 'keep' | 'remove';
}

export interface ReleaseResult {
  /** Objects that could not be dropped yet (a lock was not free): harmless, retried later. */
  pending: string[];
}

const LOCK_TIMEOUT = "SET LOCAL lock_timeout = '2s'";
export const CAPTURE_LOCK = 'ferry:capture';

async function lockCapture(db: PoolClient): Promise<void> {
  await db.query('SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))', [CAPTURE_LOCK]);
}

async function capturesExist(db: PoolClient): Promise<boolean> {
  const { rows } = await db.query(`SELECT to_regclass('${CAPTURE_SCHEMA}.captures') IS NOT NULL AS present`);
  return rows[0].present;
}

/**
 * Installs capture for `input.tables` inside the caller's transaction (its lock_timeout set): the
 * capture lock, Ferry's capture schema, then per table its log, trigger function and triggers,
 * the TRUNCATE refusal on it and its partitions, the armed freeze when asked, and the DDL guard
 * (needs superuser; without it, or with `guard: false`, the sync compares column fingerprints).
 * A migration whose capture is installed already is left as it is.
 */
export async function installCaptureIn(db: PoolClient, input: CaptureInput, { guard = true } = {}): Promise<{ ddlGuard: boolean }> {
  await lockCapture(db);
  await migrateSchema(db, CAPTURE_BOOKKEEPING);
  const installed = await db.query(`SELECT ddl_guard FROM ${CAPTURE_SCHEMA}.captures WHERE migration_id = $1 LIMIT 1`, [input.migrationId]);
  if (installed.rowCount) return { ddlGuard: installed.rows[0].ddl_guard as boolean };

  await db.query(createRefuseTruncateSql(input.migrationId));
  if (input.armFreeze) {
    await db.query(`CREATE SCHEMA IF NOT EXISTS ${FREEZE_SCHEMA}`);
    await db.query(createFreezeStateSql(input.migrationId));
    await db.query(createArmedFreezeFunctionSql(input.migrationId));
  }
  const relids: number[] = [];
  // The tables and all their partitions: what the DDL guard protects.
  const guarded: number[] = [];
  for (const table of input.tables) {
    relids.push(await captureTable(db, input, table, guarded));
  }
  const ddlGuard = guard && (await installGuard(db, input.migrationId, guarded));
  for (const [i, table] of input.tables.entries()) {
    const fp = await db.query(FINGERPRINT_SQL, [relids[i]]);
    const parts = await db.query(PARTITIONS_SQL, [relids[i]]);
    await db.query(
      `INSERT INTO ${CAPTURE_SCHEMA}.captures (migration_id, table_index, relid, fingerprint, ddl_guard, partitions) VALUES ($1, $2, $3, $4, $5, $6)`,
      [input.migrationId, table.index, relids[i], fp.rows[0].fingerprint, ddlGuard, parts.rows[0].partitions],
    );
  }
  if (input.logical) {
    const logical = logicalNames(input.migrationId);
    // Committed before the slot exists: the stream decodes with the publication in place.
    await db.query(createPublicationSql(logical, input.tables.map((t) => t.source)));
    await db.query(`INSERT INTO ${SLOTS_TABLE} (migration_id, slot, publication) VALUES ($1, $2, $3)`, [input.migrationId, logical.slot, logical.publication]);
  }
  return { ddlGuard };
}

/** One table's log, trigger function and triggers; returns its relid and adds it and its partitions to `guarded`. */
async function captureTable(db: PoolClient, input: CaptureInput, table: CaptureTable, guarded: number[]): Promise<number> {
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
  await db.query(createLogSql(names));
  if (!input.logical) {
    await db.query(createCaptureFunctionSql(names, table.keyColumns));
    for (const sql of createCaptureTriggerSql(self.name, names, input.migrationId)) await db.query(sql);
  }
  // Statement triggers fire only for statements that name their own table: a write or
  // TRUNCATE straight into a partition meets the partition's.
  for (const { relid, name } of [self, ...partitions]) {
    guarded.push(relid);
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

export function createCaptureActivities({ connections, logger }: ActivityDeps) {
  async function installCapture(input: CaptureInput): Promise<{ ddlGuard: boolean }> {
    const installed = await connections.withClient(input.source, (db) =>
      inTransaction(db, async () => {
        await db.query(LOCK_TIMEOUT);
        const result = await installCaptureIn(db, input);
        logger.info(
          { migrationId: input.migrationId, tables: input.tables.length, ddlGuard: result.ddlGuard, armFreeze: Boolean(input.armFreeze), logical: Boolean(input.logical) },
          'capture installed',
        );
        return result;
      }),
    );
    // The slot outside that transaction (PostgreSQL refuses it in one that wrote), and on a retry
    // that found the rest installed: its start is where the stream begins, before any row is copied.
    if (input.logical) await connections.withClient(input.source, (db) => ensureSlot(db, logicalNames(input.migrationId)));
    return installed;
  }

  /**
   * Removes capture (and, with freeze: remove, the freeze) from the source. First what needs no
   * table lock — the DDL guard goes, the capture and TRUNCATE-refusal functions become no-ops —
   * so capture stops at once; then the triggers, one table at a time under a short lock_timeout.
   * A table whose lock is not free (a long reader, pg_dump) is reported as pending instead of
   * failing: its triggers are already harmless, and a later call finishes the job. What the
   * triggers used (functions, logs, the freeze state) goes only once no trigger uses it.
   */
  async function releaseSource(input: ReleaseInput): Promise<ReleaseResult> {
    const { migrationId } = input;
    const triggers = triggerNames(migrationId);
    const pending: string[] = [];
    await connections.withClient(input.source, async (db) => {
      // Logical capture first: its slot holds WAL on the source for as long as it exists.
      await dropLogical(db, logicalNames(migrationId));
      const captured = await inTransaction(db, async () => {
        await db.query(LOCK_TIMEOUT);
        await lockCapture(db);
        if (!(await capturesExist(db))) return [];
        for (const name of guardEventTriggers(migrationId)) await db.query(`DROP EVENT TRIGGER IF EXISTS ${quoteIdent(name)}`);
        await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(guardFunction(migrationId))}()`);
        const { rows } = await db.query(`SELECT table_index FROM ${CAPTURE_SCHEMA}.captures WHERE migration_id = $1 ORDER BY table_index`, [migrationId]);
        for (const { table_index } of rows) {
          const fn = await db.query('SELECT to_regprocedure($1) IS NOT NULL AS present', [`${quoteQualified(captureNames(migrationId, table_index).captureFunction)}()`]);
          if (fn.rows[0].present) await db.query(neutralCaptureFunctionSql(captureNames(migrationId, table_index)));
        }
        const refuse = await db.query('SELECT to_regprocedure($1) IS NOT NULL AS present', [`${quoteQualified(refuseTruncateFunction(migrationId))}()`]);
        if (refuse.rows[0].present) await db.query(neutralRefuseTruncateSql(migrationId));
        return rows as { table_index: number }[];
      });

      // Found by name, not through the captured tables: each partition carries a TRUNCATE
      // refusal of its own (their capture triggers are clones, dropped with the parent's).
      for (const name of await relationsWithTriggers(db, [triggers.capture, triggers.truncate])) {
        const dropped = await dropTriggers(db, name, [triggers.capture, triggers.truncate]);
        if (!dropped) pending.push(`capture triggers on ${name}`);
      }
      if (captured.length > 0 && pending.length === 0) {
        await inTransaction(db, async () => {
          await db.query(LOCK_TIMEOUT);
          await lockCapture(db);
          for (const { table_index } of captured) {
            const names = captureNames(migrationId, table_index);
            await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(names.captureFunction)}()`);
            await db.query(`DROP TABLE IF EXISTS ${quoteQualified(names.log)}`);
          }
          await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(refuseTruncateFunction(migrationId))}()`);
          await db.query(`DELETE FROM ${CAPTURE_SCHEMA}.captures WHERE migration_id = $1`, [migrationId]);
          const logical = await db.query(`SELECT to_regclass('${SLOTS_TABLE}') IS NOT NULL AS present`);
          if (logical.rows[0].present) await db.query(`DELETE FROM ${SLOTS_TABLE} WHERE migration_id = $1`, [migrationId]);
          const others = await db.query(
            `SELECT 1 FROM ${CAPTURE_SCHEMA}.captures${logical.rows[0].present ? ` UNION ALL SELECT 1 FROM ${SLOTS_TABLE}` : ''} LIMIT 1`,
          );
          if (others.rowCount === 0) await dropSchemaIfEmpty(db, CAPTURE_SCHEMA, ['captures', 'slots']);
        });
      }
      if (input.freeze === 'remove') pending.push(...(await removeFreeze(db, migrationId)).pending);
    });
    logger.info({ migrationId, freeze: input.freeze, pending }, pending.length ? 'source partly released' : 'source released');
    return { pending };
  }

  /**
   * The compensation of executions begun by an older Ferry: as releaseSource, keeping any
   * freeze, but failing (and so retried) while a table's lock is not free.
   */
  async function removeCapture(input: SourceRef): Promise<void> {
    const { pending } = await releaseSource({ ...input, freeze: 'keep' });
    if (pending.length > 0) throw new Error(`could not remove yet: ${pending.join(', ')}`);
  }

  return { installCapture, releaseSource, removeCapture };
}
