/**
 * Triggers on tables the application uses: finding a table's partitions, and dropping triggers
 * without stalling the application behind a long reader.
 */
import { ClientBase, PoolClient } from 'pg';
import { inTransaction } from './connections';
import { sqlState } from './errors';
import { quoteIdent } from '../core/identifiers';
import { SQLSTATE } from '../core/failure-types';

/** Dropping a trigger needs ACCESS EXCLUSIVE: queue behind a long reader only briefly. */
const DROP_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '500ms'";

/**
 * A trigger PostgreSQL cloned from a partitioned table's row trigger onto a partition: it cannot
 * be dropped by itself, and goes when the parent's is dropped.
 */
const NOT_CLONED = `NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
   WHERE d.classid = 'pg_catalog.pg_trigger'::regclass AND d.objid = t.oid AND d.deptype = 'P')`;

/** The table and, for a partitioned table, every partition under it; parents first. */
export async function relationTree(db: PoolClient, relid: number): Promise<{ relid: number; name: string }[]> {
  const { rows } = await db.query(
    `SELECT $1::oid::int8 AS relid, $1::oid::regclass::text AS name, 0 AS level
      UNION ALL
     SELECT relid::int8, relid::regclass::text, level FROM pg_catalog.pg_partition_tree($1::oid::regclass) WHERE level > 0
      ORDER BY level, name`,
    [relid],
  );
  return rows.map((r) => ({ relid: Number(r.relid), name: r.name }));
}

/**
 * The oids of the tables named (quoted, qualified) and of all their partitions, in one statement
 * whatever their number; a name that no longer resolves is left out.
 */
export async function relationTrees(db: ClientBase, quotedNames: string[]): Promise<number[]> {
  const { rows } = await db.query(
    `SELECT DISTINCT tree.relid::int8 AS relid
       FROM unnest($1::text[]) AS n(name)
      CROSS JOIN LATERAL (SELECT pg_catalog.to_regclass(n.name) AS root) r
      CROSS JOIN LATERAL (SELECT r.root::oid AS relid UNION ALL SELECT p.relid::oid FROM pg_catalog.pg_partition_tree(r.root) p WHERE p.level > 0) tree
      WHERE r.root IS NOT NULL`,
    [quotedNames],
  );
  return rows.map((r) => Number(r.relid));
}

/**
 * The relations (regclass text) that carry a trigger of one of these names of their own, clones
 * left out. Trigger names are per migration, so this finds a migration's triggers wherever they
 * are — on a partition detached since, too.
 */
export async function relationsWithTriggers(db: PoolClient, names: string[]): Promise<string[]> {
  const { rows } = await db.query(
    `SELECT t.tgrelid::regclass::text AS relation FROM pg_catalog.pg_trigger t
      WHERE t.tgname = ANY ($1::text[]) AND ${NOT_CLONED}
      GROUP BY t.tgrelid ORDER BY min(t.oid)`,
    [names],
  );
  return rows.map((r) => r.relation);
}

/**
 * Drops the named triggers of one table (`relation` as regclass text) in a transaction of its
 * own, under a short lock timeout. False when the table's lock was not free: nothing was
 * dropped, and a later call tries again.
 */
export async function dropTriggers(db: PoolClient, relation: string, names: string[]): Promise<boolean> {
  const present = await db.query(
    `SELECT t.tgname FROM pg_catalog.pg_trigger t WHERE t.tgrelid = to_regclass($1) AND t.tgname = ANY ($2::text[]) AND ${NOT_CLONED}`,
    [relation, names],
  );
  if (present.rowCount === 0) return true;
  try {
    await inTransaction(db, async () => {
      await db.query(DROP_LOCK_TIMEOUT);
      for (const { tgname } of present.rows) await db.query(`DROP TRIGGER IF EXISTS ${quoteIdent(tgname)} ON ${relation}`);
    });
    return true;
  } catch (err) {
    if (sqlState(err) === SQLSTATE.lockNotAvailable) return false;
    throw err;
  }
}
