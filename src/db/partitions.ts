/**
 * Partitioned tables on the target: the source's partition tree (each partition's bounds and,
 * when it is partitioned in turn, its own key) and the DDL that rebuilds it under the target
 * table. Partitions keep their names and go into the target table's schema, so a table mapped
 * to another schema takes its partitions along. Rows are still copied through the parent
 * (COPY into a partitioned table routes each row), and an index built on the parent cascades
 * to every partition, so the partitions need nothing else from Ferry.
 */
import { ClientBase } from 'pg';
import { QualifiedName, quoteQualified } from '../core/identifiers';

export interface PartitionInfo {
  name: QualifiedName;
  /** The partitioned table it belongs to; null for a direct partition of the migrated table. */
  parent: QualifiedName | null;
  /** `FOR VALUES …` or `DEFAULT`, as pg_get_expr prints relpartbound. */
  bound: string;
  /** For a partition that is partitioned in turn: `RANGE (…)`, as pg_get_partkeydef prints it. */
  partitionKey: string | null;
}

/** Every partition under the table, parents before their own partitions. */
const PARTITIONS_SQL = `
SELECT n.nspname::text AS schema, c.relname::text AS name,
       CASE WHEN t.level > 1 THEN pn.nspname::text END AS parent_schema,
       CASE WHEN t.level > 1 THEN p.relname::text END AS parent_name,
       pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS bound,
       CASE WHEN c.relkind = 'p' THEN pg_catalog.pg_get_partkeydef(c.oid) END AS partition_key
  FROM pg_catalog.pg_partition_tree($1::regclass) t
  JOIN pg_catalog.pg_class c ON c.oid = t.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_class p ON p.oid = t.parentrelid
  JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
 WHERE t.level > 0
 ORDER BY t.level, n.nspname, c.relname`;

export async function readPartitions(db: ClientBase, table: QualifiedName): Promise<PartitionInfo[]> {
  const { rows } = await db.query(PARTITIONS_SQL, [quoteQualified(table)]);
  return rows.map((r) => ({
    name: { schema: r.schema, name: r.name },
    parent: r.parent_name === null ? null : { schema: r.parent_schema, name: r.parent_name },
    bound: r.bound,
    partitionKey: r.partition_key,
  }));
}

/** Where a source partition goes: the target table's schema, the partition's own name. */
export function targetPartitionName(partition: QualifiedName, target: QualifiedName): QualifiedName {
  return { schema: target.schema, name: partition.name };
}

/** CREATE TABLE … PARTITION OF its (target) parent, with its bounds and, if any, its own key. */
export function createPartitionSql(partition: PartitionInfo, target: QualifiedName): string {
  const parent = partition.parent ? targetPartitionName(partition.parent, target) : target;
  const key = partition.partitionKey ? ` PARTITION BY ${partition.partitionKey}` : '';
  return `CREATE TABLE ${quoteQualified(targetPartitionName(partition.name, target))} PARTITION OF ${quoteQualified(parent)} ${partition.bound}${key}`;
}
