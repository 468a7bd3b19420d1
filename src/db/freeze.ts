/** Removing a migration's write freeze from the source: used by the freeze's activities and by the release of capture. */
import { PoolClient } from 'pg';
import { quoteQualified } from '../core/identifiers';
import { armedFreezeFunction, FREEZE_SCHEMA, freezeFunction, freezeStateSequence, triggerNames } from './capture-sql';
import { inTransaction } from './connections';
import { dropTriggers, relationsWithTriggers } from './triggers';

/**
 * Drops the freeze triggers where their table's lock is free, and the freeze's function and
 * state once no trigger uses them (a trigger left behind reads the state on every write).
 */
export async function removeFreeze(db: PoolClient, migrationId: string): Promise<{ pending: string[] }> {
  const { freeze, rowFreeze } = triggerNames(migrationId);
  const pending: string[] = [];
  // Every relation that has one: a partitioned table's partitions each carry their own.
  for (const relation of await relationsWithTriggers(db, [freeze, rowFreeze])) {
    if (!(await dropTriggers(db, relation, [freeze, rowFreeze]))) pending.push(`freeze trigger on ${relation}`);
  }
  if (pending.length > 0) return { pending };
  await inTransaction(db, async () => {
    await db.query("SET LOCAL lock_timeout = '2s'");
    await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(freezeFunction(migrationId))}()`);
    await db.query(`DROP FUNCTION IF EXISTS ${quoteQualified(armedFreezeFunction(migrationId))}()`);
    await db.query(`DROP SEQUENCE IF EXISTS ${quoteQualified(freezeStateSequence(migrationId))}`);
    const schema = await db.query('SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1', [FREEZE_SCHEMA]);
    if (schema.rowCount === 0) return;
    const left = await db.query(
      `SELECT 1 FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_namespace n ON d.refobjid = n.oid
        WHERE d.refclassid = 'pg_catalog.pg_namespace'::regclass AND n.nspname = $1 LIMIT 1`,
      [FREEZE_SCHEMA],
    );
    if (left.rowCount === 0) await db.query(`DROP SCHEMA ${FREEZE_SCHEMA}`);
  });
  return { pending };
}
