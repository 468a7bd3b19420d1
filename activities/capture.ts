/**
 * Online mode on the source: installCapture (change log, row triggers, TRUNCATE refusal, the
 * armed freeze, DDL guard — all tables in one transaction, before the first row is copied; a
 * partitioned table's partitions get the statement triggers too) and releaseSource (everything
 * removed again). Locks are taken with a short lock_timeout: a CREATE TRIGGER queued behind an
 * idle transaction would otherwise stall every writer of the table, so it gives up quickly and
 * Temporal retries it. Every step is idempotent.
 */
import { inTransaction } from '../src/db/connections';
import {
  CAPTURE_SCHEMA,
  captureNames,
  guardEventTriggers,
  guardFunction,
  neutralCaptureFunctionSql,
  neutralRefuseTruncateSql,
  refuseTruncateFunction,
  triggerNames,
} from '../src/db/capture-sql';
import { dropLogical, ensureSlot, logicalNames, SLOTS_TABLE } from '../src/db/logical-sql';
import { quoteIdent, quoteQualified } from '../src/core/identifiers';
import { dropTriggers, relationsWithTriggers } from '../src/db/triggers';
import { dropSchemaIfEmpty } from '../src/db/schema-versions';
import { capturesExist, installCaptureInParts, LOCK_TIMEOUT, lockCapture } from '../src/db/capture-install';
import { ActivityDeps } from './deps';
import { removeFreeze } from '../src/db/freeze';
import type { CaptureInput, SourceRef } from '../src/core/capture-input';

export type { CaptureInput, CaptureTable, SourceRef } from '../src/core/capture-input';

export interface ReleaseInput extends SourceRef {
  /** keep: the tables stay frozen (cutover with keep-frozen); remove: nothing of Ferry stays. */
  freeze: 'keep' | 'remove';
}

export interface ReleaseResult {
  /** Objects that could not be dropped yet (a lock was not free): harmless, retried later. */
  pending: string[];
}

export { CAPTURE_LOCK } from '../src/db/capture-install';

export function createCaptureActivities({ connections, logger }: ActivityDeps) {
  async function installCapture(input: CaptureInput): Promise<{ ddlGuard: boolean }> {
    const installed = await connections.withClient(input.source, async (db) => {
      const part = <T>(work: () => Promise<T>) =>
        inTransaction(db, async () => {
          await db.query(LOCK_TIMEOUT);
          return work();
        });
      const result = await installCaptureInParts(db, input, part);
      logger.info(
        { migrationId: input.migrationId, tables: input.tables.length, ddlGuard: result.ddlGuard, armFreeze: Boolean(input.armFreeze), logical: Boolean(input.logical) },
        'capture installed',
      );
      return result;
    });
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
        if (!(await capturesExist(db))) return undefined;
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
      // Also with no table's row: an install stopped after its first part left what the tables share.
      if (captured && pending.length === 0) {
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
          // Another migration's rows, or its functions: an install between its first part and
          // its first table's has the TRUNCATE refusal's function and no row yet.
          const others = await db.query(
            `SELECT 1 FROM ${CAPTURE_SCHEMA}.captures${logical.rows[0].present ? ` UNION ALL SELECT 1 FROM ${SLOTS_TABLE}` : ''}
              UNION ALL SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 LIMIT 1`,
            [CAPTURE_SCHEMA],
          );
          if (others.rowCount === 0) await dropSchemaIfEmpty(db, CAPTURE_SCHEMA, ['captures', 'slots', 'marks']);
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
