/**
 * Online mode on the source: installCapture (change log, row triggers, TRUNCATE refusal, DDL
 * guard — all tables in one transaction, before the first row is copied), removeCapture,
 * freezeSource and unfreezeSource. Locks are taken with a short lock_timeout: a CREATE TRIGGER
 * queued behind an idle transaction would otherwise stall every writer of the table, so it
 * gives up quickly and Temporal retries it. Every step is idempotent.
 */
import { PoolClient } from 'pg';
import { inTransaction } from '../src/db/connections';
import {
  CAPTURE_BOOKKEEPING_DDL,
  CAPTURE_SCHEMA,
  captureNames,
  createCaptureFunctionSql,
  createFreezeFunctionSql,
  createFreezeTriggerSql,
  createGuardSql,
  createLogSql,
  createRefuseTruncateSql,
  createTableTriggersSql,
  FINGERPRINT_SQL,
  FREEZE_SCHEMA,
  freezeFunction,
  GUARD_BYPASS,
  guardEventTriggers,
  guardFunction,
  refuseTruncateFunction,
  triggerNames,
} from '../src/db/capture-sql';
import { asActivityFailure, refusal, sqlState } from '../src/db/errors';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified } from '../src/identifiers';
import { KeyColumn } from '../src/plan';
import { ActivityDeps } from './deps';

export interface CaptureTable {
  index: number;
  source: QualifiedName;
  keyColumns: KeyColumn[];
}

export interface CaptureInput {
  migrationId: string;
  source: string;
  tables: CaptureTable[];
}

export interface SourceRef {
  migrationId: string;
  source: string;
}

const LOCK_TIMEOUT = "SET LOCAL lock_timeout = '2s'";
const CAPTURE_LOCK = 'ferry:capture';

async function lockCapture(db: PoolClient): Promise<void> {
  await db.query('SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))', [CAPTURE_LOCK]);
}

async function schemaExists(db: PoolClient, schema: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1', [schema]);
  return rows.length > 0;
}

export function createCaptureActivities({ connections, logger }: ActivityDeps) {
  async function installCapture(input: CaptureInput): Promise<{ ddlGuard: boolean }> {
    try {
      return await connections.withClient(input.source, (db) =>
        inTransaction(db, async () => {
          await db.query(LOCK_TIMEOUT);
          await lockCapture(db);
          await db.query(CAPTURE_BOOKKEEPING_DDL);
          const installed = await db.query(`SELECT ddl_guard FROM ${CAPTURE_SCHEMA}.captures WHERE migration_id = $1 LIMIT 1`, [input.migrationId]);
          if (installed.rowCount) return { ddlGuard: installed.rows[0].ddl_guard as boolean };

          await db.query(createRefuseTruncateSql(input.migrationId));
          const relids: number[] = [];
          for (const table of input.tables) {
            const names = captureNames(input.migrationId, table.index);
            const rel = await db.query('SELECT to_regclass($1)::oid::int8 AS relid', [quoteQualified(table.source)]);
            if (!rel.rows[0].relid) throw refusal('MissingTable', `table ${displayQualified(table.source)} disappeared from the source`);
            const others = await db.query(
              `SELECT tgname FROM pg_catalog.pg_trigger WHERE tgrelid = $1 AND tgname LIKE 'ferry\\_capture\\_%' LIMIT 1`,
              [rel.rows[0].relid],
            );
            if (others.rowCount) {
              throw refusal(
                'AlreadyCaptured',
                `${displayQualified(table.source)} is already captured by another online migration (trigger ${others.rows[0].tgname}); finish or cancel that one first`,
              );
            }
            relids.push(Number(rel.rows[0].relid));
            await db.query(createLogSql(names));
            await db.query(createCaptureFunctionSql(names, table.keyColumns));
            for (const sql of createTableTriggersSql(table.source, names, input.migrationId)) await db.query(sql);
          }
          // The DDL guard needs superuser (event triggers); without it, sync compares fingerprints.
          let ddlGuard = true;
          await db.query('SAVEPOINT guard');
          try {
            for (const sql of createGuardSql(input.migrationId, relids)) await db.query(sql);
            await db.query('RELEASE SAVEPOINT guard');
          } catch (err) {
            if (sqlState(err) !== '42501') throw err;
            await db.query('ROLLBACK TO SAVEPOINT guard');
            ddlGuard = false;
          }
          for (const [i, table] of input.tables.entries()) {
            const fp = await db.query(FINGERPRINT_SQL, [relids[i]]);
            await db.query(
              `INSERT INTO ${CAPTURE_SCHEMA}.captures (migration_id, table_index, relid, fingerprint, ddl_guard) VALUES ($1, $2, $3, $4, $5)`,
              [input.migrationId, table.index, relids[i], fp.rows[0].fingerprint, ddlGuard],
            );
          }
          logger.info({ migrationId: input.migrationId, tables: input.tables.length, ddlGuard }, 'capture installed');
          return { ddlGuard };
        }),
      );
    } catch (err) {
      throw asActivityFailure(err, 'installCapture');
    }
  }

  async function removeCapture({ migrationId, source }: SourceRef): Promise<void> {
    try {
      await connections.withClient(source, (db) =>
        inTransaction(db, async () => {
          await db.query(LOCK_TIMEOUT);
          await lockCapture(db);
          if (!(await schemaExists(db, CAPTURE_SCHEMA))) return;
          const hasCaptures = await db.query(`SELECT to_regclass('${CAPTURE_SCHEMA}.captures') IS NOT NULL AS present`);
          if (!hasCaptures.rows[0].present) return;
          for (const name of guardEventTriggers(migrationId)) await db.query(`DROP EVENT TRIGGER IF EXISTS ${quoteIdent(name)}`);
          await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(guardFunction(migrationId))}()`);
          const { rows } = await db.query(
            `SELECT table_index, relid::regclass::text AS relation FROM ${CAPTURE_SCHEMA}.captures c
              WHERE migration_id = $1 AND EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = c.relid)`,
            [migrationId],
          );
          const indexes = (await db.query(`SELECT table_index FROM ${CAPTURE_SCHEMA}.captures WHERE migration_id = $1`, [migrationId])).rows;
          const triggers = triggerNames(migrationId);
          for (const { relation } of rows) {
            await db.query(`DROP TRIGGER IF EXISTS ${quoteIdent(triggers.capture)} ON ${relation}`);
            await db.query(`DROP TRIGGER IF EXISTS ${quoteIdent(triggers.truncate)} ON ${relation}`);
          }
          for (const { table_index } of indexes) {
            const names = captureNames(migrationId, table_index);
            await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(names.captureFunction)}()`);
            await db.query(`DROP TABLE IF EXISTS ${quoteQualified(names.log)}`);
          }
          await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(refuseTruncateFunction(migrationId))}()`);
          await db.query(`DELETE FROM ${CAPTURE_SCHEMA}.captures WHERE migration_id = $1`, [migrationId]);
          const others = await db.query(`SELECT 1 FROM ${CAPTURE_SCHEMA}.captures LIMIT 1`);
          if (others.rowCount === 0) await db.query(`DROP SCHEMA ${CAPTURE_SCHEMA} CASCADE`);
          logger.info({ migrationId }, 'capture removed');
        }),
      );
    } catch (err) {
      throw asActivityFailure(err, 'removeCapture');
    }
  }

  /** Freezes writes on every migrated table in one transaction (statement-level BEFORE trigger). */
  async function freezeSource(input: CaptureInput): Promise<{ frozenAt: string }> {
    try {
      return await connections.withClient(input.source, (db) =>
        inTransaction(db, async () => {
          await db.query(LOCK_TIMEOUT);
          await db.query(GUARD_BYPASS);
          await db.query(`CREATE SCHEMA IF NOT EXISTS ${FREEZE_SCHEMA}`);
          await db.query(createFreezeFunctionSql(input.migrationId));
          const trigger = triggerNames(input.migrationId).freeze;
          for (const table of input.tables) {
            const exists = await db.query('SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2', [
              quoteQualified(table.source),
              trigger,
            ]);
            if (exists.rowCount) continue;
            for (const sql of createFreezeTriggerSql(table.source, input.migrationId)) await db.query(sql);
          }
          const { rows } = await db.query(`SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at`);
          logger.info({ migrationId: input.migrationId }, 'source frozen');
          return { frozenAt: rows[0].at };
        }),
      );
    } catch (err) {
      throw asActivityFailure(err, 'freezeSource');
    }
  }

  async function unfreezeSource({ migrationId, source }: SourceRef): Promise<{ unfrozen: string[] }> {
    try {
      return await connections.withClient(source, (db) =>
        inTransaction(db, async () => {
          await db.query(LOCK_TIMEOUT);
          const trigger = triggerNames(migrationId).freeze;
          const { rows } = await db.query('SELECT tgrelid::regclass::text AS relation FROM pg_catalog.pg_trigger WHERE tgname = $1', [trigger]);
          for (const { relation } of rows) await db.query(`DROP TRIGGER IF EXISTS ${quoteIdent(trigger)} ON ${relation}`);
          await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(freezeFunction(migrationId))}()`);
          if (await schemaExists(db, FREEZE_SCHEMA)) {
            const left = await db.query(
              `SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 LIMIT 1`,
              [FREEZE_SCHEMA],
            );
            if (left.rowCount === 0) await db.query(`DROP SCHEMA ${FREEZE_SCHEMA}`);
          }
          logger.info({ migrationId, tables: rows.length }, 'source unfrozen');
          return { unfrozen: rows.map((r) => r.relation as string) };
        }),
      );
    } catch (err) {
      throw asActivityFailure(err, 'unfreezeSource');
    }
  }

  return { installCapture, removeCapture, freezeSource, unfreezeSource };
}
