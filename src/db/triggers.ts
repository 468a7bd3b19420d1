/**
 * Triggers on tables the application uses: finding a table's partitions, and dropping triggers
 * without stalling the application behind a long reader.
 */
import { PoolClient } from 'pg';
import { inTransaction } from './connections';
import { sqlState } from './errors';
import { quoteIdent } from '../identifiers';

/** Dropping a trigger needs ACCESS EXCLUSIVE: queue behind a long reader only briefly. */
const DROP_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '500ms'";

/**
 * The table and, for a partitioned table, every partition under it — the table first: a row
 * trigger's clone on a partition can only be dropped with the trigger it was cloned from
 * (DROP TRIGGER on the partition fails with 2BP01), which takes its clones along.
 */
export async function relationTree(db: PoolClient, relid: number): Promise<{ relid: number; name: string }[]> {
  const { rows } = await db.query(
    `SELECT relid::int8 AS relid, relid::regclass::text AS name
       FROM (SELECT relid, level FROM pg_catalog.pg_partition_tree($1::regclass) UNION SELECT $1::regclass, 0) tree
      ORDER BY level, name`,
    [relid],
  );
  return rows.map((r) => ({ relid: Number(r.relid), name: r.name }));
}

/**
 * Drops the named triggers of one table (`relation` as regclass text) in a transaction of its
 * own, under a short lock timeout. False when the table's lock was not free: nothing was
 * dropped, and a later call tries again.
 */
export async function dropTriggers(db: PoolClient, relation: string, names: string[]): Promise<boolean> {
  const present = await db.query('SELECT tgname FROM pg_catalog.pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = ANY ($2::text[])', [
    relation,
    names,
  ]);
  if (present.rowCount === 0) return true;
  try {
    await inTransaction(db, async () => {
      await db.query(DROP_LOCK_TIMEOUT);
      for (const { tgname } of present.rows) await db.query(`DROP TRIGGER IF EXISTS ${quoteIdent(tgname)} ON ${relation}`);
    });
    return true;
  } catch (err) {
    if (sqlState(err) === '55P03') return false;
    throw err;
  }
}
