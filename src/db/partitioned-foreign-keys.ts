/**
 * A foreign key from a partitioned table. PostgreSQL before 18 refuses one NOT VALID on a
 * partitioned table, and adding it validated scans every partition under a lock that stops
 * writers. So it is added NOT VALID on each leaf partition under the key's own name (a brief
 * lock each), each leaf's is validated (a scan that lets writers go on), and then it is added on
 * the parent: PostgreSQL adopts the leaves' validated keys as the parent's clones, without a
 * scan — the partitions end up with inherited keys, as on the source.
 */
import { ClientBase } from 'pg';
import { QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';

/** The leaf partitions (those that hold rows) under a partitioned table, by name as quoted text. */
async function leaves(db: ClientBase, table: QualifiedName): Promise<string[]> {
  const { rows } = await db.query<{ leaf: string }>(
    `SELECT p.relid::regclass::text AS leaf FROM pg_catalog.pg_partition_tree(to_regclass($1)) p WHERE p.isleaf ORDER BY 1`,
    [quoteQualified(table)],
  );
  return rows.map((r) => r.leaf);
}

/**
 * The first step: the key NOT VALID on every leaf that lacks it. `definition` is the key's
 * (`FOREIGN KEY (…) REFERENCES … NOT VALID`). A partitioned table without partitions gets it on
 * the parent at once: there is nothing to scan.
 */
export async function addOnLeaves(db: ClientBase, table: QualifiedName, name: string, definition: string): Promise<void> {
  const all = await leaves(db, table);
  if (all.length === 0) {
    await db.query(`ALTER TABLE ${quoteQualified(table)} ADD CONSTRAINT ${quoteIdent(name)} ${definition.replace(/ NOT VALID$/, '')}`);
    return;
  }
  for (const leaf of all) {
    const { rows } = await db.query('SELECT 1 FROM pg_catalog.pg_constraint WHERE conrelid = $1::regclass AND conname = $2', [leaf, name]);
    if (rows.length === 0) await db.query(`ALTER TABLE ${leaf} ADD CONSTRAINT ${quoteIdent(name)} ${definition}`);
  }
}

/**
 * The second: each leaf's key validated, then the key added on the parent (adopting them). False
 * when the leaves carry no such key (nothing was added for it).
 */
export async function validateOnLeavesAndAdopt(db: ClientBase, table: QualifiedName, name: string): Promise<boolean> {
  const { rows } = await db.query<{ leaf: string; validated: boolean; definition: string }>(
    `SELECT c.conrelid::regclass::text AS leaf, c.convalidated AS validated, pg_catalog.pg_get_constraintdef(c.oid) AS definition
       FROM pg_catalog.pg_partition_tree(to_regclass($1)) p JOIN pg_catalog.pg_constraint c ON c.conrelid = p.relid AND c.conname = $2 AND c.contype = 'f'
      WHERE p.isleaf ORDER BY 1`,
    [quoteQualified(table), name],
  );
  if (rows.length === 0) return false;
  for (const row of rows) if (!row.validated) await db.query(`ALTER TABLE ${row.leaf} VALIDATE CONSTRAINT ${quoteIdent(name)}`);
  await db.query(`ALTER TABLE ${quoteQualified(table)} ADD CONSTRAINT ${quoteIdent(name)} ${rows[0].definition.replace(/ NOT VALID$/, '')}`);
  return true;
}
