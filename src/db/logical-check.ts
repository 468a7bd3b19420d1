/**
 * What logical capture needs from a source, each missing piece with its fix: wal_level=logical,
 * a free replication slot and WAL sender, a role that may replicate (REPLICATION or superuser)
 * and publish the tables (their owner, or superuser), a partitioned table only from PostgreSQL 13
 * (published through its root), and a replica identity that carries the key (the old key of a
 * delete or key change comes from it; each partition's own for a partitioned table), or for a
 * table without a key the whole row (FULL).
 */
import { ClientBase } from 'pg';
import { displayQualified, QualifiedName, quoteQualified } from '../core/identifiers';
import { KeyColumn } from '../core/plan';

export interface LogicalTable {
  source: QualifiedName;
  keyColumns: KeyColumn[];
}

const SERVER_SQL = `
SELECT current_setting('wal_level') AS wal_level,
       current_setting('max_replication_slots')::int AS max_slots,
       (SELECT count(*) FROM pg_catalog.pg_replication_slots)::int AS slots,
       current_setting('max_wal_senders')::int AS max_senders,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication)::int AS senders,
       r.rolsuper AS superuser, r.rolreplication AS replication,
       has_database_privilege(current_database(), 'CREATE') AS can_create,
       current_setting('server_version_num')::int AS version
  FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`;

const TABLE_SQL = `
SELECT c.relkind::text AS relkind, c.relreplident::text AS identity,
       pg_catalog.pg_has_role(c.relowner, 'USAGE') AS owned,
       (SELECT array_agg(a.attname::text ORDER BY a.attname)
          FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
         WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))) AS identity_columns,
       (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '') AS generated_columns,
       -- A table keyed by a unique index (no primary key): that index, for the fix to name.
       (SELECT quote_ident(ci.relname) FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid
         WHERE i.indrelid = c.oid AND i.indisunique AND NOT i.indisprimary AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL
           AND ARRAY(SELECT a.attname::text FROM unnest((i.indkey::int2[])[0:i.indnkeyatts - 1]) WITH ORDINALITY k(attnum, ord)
                       JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord) = $2::text[]
         ORDER BY 1 LIMIT 1) AS key_index,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) AS has_primary_key
  FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`;

/** Why a relation's replica identity would not say which row a change is about; null when it does. */
function identityProblem(label: string, t: { identity: string; identity_columns: string[] | null; has_primary_key: boolean; key_index: string | null }, keys: string[]): string | null {
  if (keys.length === 0) {
    // A table without a key: its changes are applied as whole rows, which only FULL sends.
    return t.identity === 'f' ? null : `${label} has no key, so its changes must carry whole rows: ALTER TABLE ${label} REPLICA IDENTITY FULL`;
  }
  const identity = t.identity_columns ?? [];
  const carriesKey = t.identity === 'f' || ((t.identity === 'd' || t.identity === 'i') && keys.every((k) => identity.includes(k)));
  if (carriesKey) return null;
  const what = t.identity === 'n' ? 'REPLICA IDENTITY NOTHING' : 'a replica identity without its key columns';
  const fix = t.has_primary_key || !t.key_index ? 'REPLICA IDENTITY DEFAULT' : `REPLICA IDENTITY USING INDEX ${t.key_index}`;
  return `${label} has ${what}, so a delete or key change would not carry the old key: ALTER TABLE ${label} ${fix} (or FULL)`;
}

export async function logicalCaptureProblems(db: ClientBase, tables: LogicalTable[]): Promise<string[]> {
  const problems: string[] = [];
  const s = (await db.query(SERVER_SQL)).rows[0];
  if (s.wal_level !== 'logical') {
    problems.push(`wal_level is ${s.wal_level}: set wal_level = logical in postgresql.conf and restart the server`);
  }
  if (s.slots >= s.max_slots) problems.push(`all ${s.max_slots} replication slots are taken (max_replication_slots): drop an unused slot or raise the setting`);
  if (s.senders >= s.max_senders) problems.push(`all ${s.max_senders} WAL senders are busy (max_wal_senders): raise the setting`);
  if (!s.superuser && !s.replication) problems.push(`Ferry's role lacks the REPLICATION attribute: ALTER ROLE … WITH REPLICATION`);
  if (!s.superuser && !s.can_create) problems.push(`Ferry's role may not create a publication in this database: GRANT CREATE ON DATABASE … TO …`);
  for (const table of tables) {
    const label = displayQualified(table.source);
    const keys = table.keyColumns.map((k) => k.name);
    const { rows } = await db.query(TABLE_SQL, [quoteQualified(table.source), keys]);
    if (rows.length === 0) continue;
    const t = rows[0];
    if (!s.superuser && !t.owned) problems.push(`${label} is not owned by Ferry's role, which a publication needs: run Ferry as its owner or a superuser`);
    // pgoutput sends no generated column: a change would arrive without its key.
    const generated: string[] = t.generated_columns ?? [];
    for (const key of keys.filter((k) => generated.includes(k))) {
      problems.push(`${label}: key column "${key}" is a generated column, which logical decoding does not send`);
    }
    if (t.relkind !== 'p') {
      const problem = identityProblem(label, t, keys);
      if (problem) problems.push(problem);
      continue;
    }
    // A partitioned table is published through its root (publish_via_partition_root, PostgreSQL
    // 13): its changes come as the root's, each with the replica identity of its partition — and
    // with the old row cut to the root's identity: both must carry the key (or the whole row).
    if (s.version < 130000) {
      problems.push(`${label} is partitioned: logical capture publishes it through its root, which needs PostgreSQL 13 or later`);
      continue;
    }
    const root = identityProblem(label, t, keys);
    if (root) problems.push(root);
    const leaves = await db.query(`SELECT relid::regclass::text AS leaf FROM pg_catalog.pg_partition_tree($1::regclass) WHERE isleaf ORDER BY 1`, [quoteQualified(table.source)]);
    for (const { leaf } of leaves.rows) {
      const problem = identityProblem(leaf, (await db.query(TABLE_SQL, [leaf, keys])).rows[0], keys);
      if (problem) problems.push(problem);
    }
  }
  return problems;
}
