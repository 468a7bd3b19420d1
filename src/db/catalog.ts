/**
 * Reads what Ferry needs to know about a table from pg_catalog: columns, keys, constraints,
 * indexes, owned sequences and the user types the columns use. SQL kept as SQL; every query
 * runs in a pinned session (empty search_path), so the definitions it returns are qualified.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ClientBase, QueryResultRow } from 'pg';
import { displayQualified, QualifiedName, quoteQualified } from '../core/identifiers';
import { FAILURE } from '../core/failure-types';
import { refusal } from './errors';

export interface ColumnInfo {
  name: string;
  type: string;
  typeOid: number;
  notNull: boolean;
  defaultExpr: string | null;
  generated: boolean;
  generationExpr: string | null;
  identity: '' | 'a' | 'd';
  /** Explicit column collation, qualified and quoted; null when the type's default applies. */
  collation: string | null;
  /** Effective collation as comparable text; null for non-collatable types. */
  effectiveCollation: string | null;
  binaryPortable: boolean;
}

export interface ConstraintInfo {
  name: string;
  definition: string;
}

export interface ForeignKeyInfo extends ConstraintInfo {
  referenced: QualifiedName;
  /** quote_ident form of the referenced table as it appears in `definition`. */
  referencedText: string;
}

export interface SequenceInfo {
  /** The column that owns it (serial, OWNED BY) or uses it as identity. */
  column: string;
  name: QualifiedName;
  /** regclass text of the sequence as the source prints it in defaults. */
  regclassText: string;
  identity: boolean;
  dataType: string;
  /** CREATE SEQUENCE options after AS type: INCREMENT BY … NO CYCLE. */
  definition: string;
}

export interface UserTypeInfo {
  oid: number;
  name: QualifiedName;
  kind: 'e' | 'd' | 'c' | 'r' | 'b' | 'm' | 'p';
  enumLabels: string[];
  domainBase: string | null;
  domainNotNull: boolean;
  domainDefault: string | null;
  domainChecks: ConstraintInfo[];
  dependsOn: number[];
}

/**
 * A key a table's rows can be told apart by: the primary key, or a unique index (a UNIQUE
 * constraint's, or a plain one) that is immediate, not partial, over plain columns that are all
 * NOT NULL — the same guarantee, and an arbiter the apply's ON CONFLICT can name.
 */
export interface TableKey {
  kind: 'primary key' | 'unique constraint' | 'unique index';
  /** The constraint's name, or the plain index's. */
  name: string;
  columns: string[];
}

export interface TableInfo {
  oid: number;
  name: QualifiedName;
  /** schema.table in quote_ident form, as pg_get_*def prints it. */
  identText: string;
  relkind: string;
  /** A partitioned table's key as pg_get_partkeydef prints it (`RANGE (day)`); null otherwise. */
  partitionKey: string | null;
  rowSecurity: boolean;
  /** pg_class.reltuples: -1 when the table was never analysed (see estimateRows). */
  estimatedRows: number;
  pages: number;
  columns: ColumnInfo[];
  /** indexDefinition: the key's index as CREATE UNIQUE INDEX (to build it before the constraint). */
  primaryKey: { name: string; columns: string[]; definition: string; indexDefinition: string } | null;
  /**
   * What Ferry copies, resumes and validates the table by: its primary key, else a unique index
   * over NOT NULL columns (see KEYS_SQL); null when it has neither.
   */
  key: TableKey | null;
  /** Every such key, the chosen one first: an existing target must have the source's among them. */
  keys: TableKey[];
  checks: ConstraintInfo[];
  /** Unique and exclusion constraints, added after the load. */
  uniques: ConstraintInfo[];
  indexes: ConstraintInfo[];
  foreignKeys: ForeignKeyInfo[];
  sequences: SequenceInfo[];
  writes: number;
  /** Tables this one inherits from by legacy inheritance (INHERITS, not partitioning), regclass text. */
  inheritsFrom: string[];
  /** Tables that inherit from this one by legacy inheritance, regclass text. */
  inheritedBy: string[];
  /** Logical-replication subscriptions that write this table or one of its partitions. */
  subscriptions: string[];
}

const TABLE_SQL = `
SELECT c.oid::int8 AS oid, c.relkind::text AS relkind, c.relrowsecurity AS row_security,
       c.reltuples::float8 AS reltuples, c.relpages::int8 AS relpages,
       quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS ident_text,
       CASE WHEN c.relkind = 'p' THEN pg_catalog.pg_get_partkeydef(c.oid) END AS partition_key,
       -- A partitioned table keeps no row statistics of its own: its partitions do. (Read per
       -- relation: the pg_stat_all_tables view computes every table's row first, 3 ms a call
       -- on a database of 500 tables, read six times per migrated table.)
       (SELECT coalesce(sum(pg_catalog.pg_stat_get_tuples_inserted(r.relid) + pg_catalog.pg_stat_get_tuples_updated(r.relid)
                            + pg_catalog.pg_stat_get_tuples_deleted(r.relid)), 0)::int8
          FROM (SELECT c.oid AS relid UNION SELECT relid FROM pg_catalog.pg_partition_tree(c.oid)) r) AS writes
       , ARRAY(SELECT i.inhparent::regclass::text FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
                WHERE i.inhrelid = c.oid AND p.relkind = 'r' ORDER BY 1) AS inherits_from
       , ARRAY(SELECT i.inhrelid::regclass::text FROM pg_catalog.pg_inherits i
                WHERE i.inhparent = c.oid AND c.relkind = 'r' ORDER BY 1) AS inherited_by
       -- The apply worker of a subscription fires row triggers only (the freeze is a statement trigger).
       , ARRAY(SELECT DISTINCT s.subname::text FROM pg_catalog.pg_subscription_rel r JOIN pg_catalog.pg_subscription s ON s.oid = r.srsubid
                WHERE r.srrelid IN (SELECT relid FROM pg_catalog.pg_partition_tree(c.oid) UNION SELECT c.oid) ORDER BY 1) AS subscriptions
       , wanted.ord::int8 AS ord
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS wanted(schema, name, ord)
  JOIN pg_catalog.pg_namespace n ON n.nspname = wanted.schema
  JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = wanted.name`;

const COLUMNS_SQL = `
SELECT a.attrelid::int8 AS relid, a.attname::text AS name,
       pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
       a.atttypid::int8 AS type_oid,
       a.attnotnull AS not_null,
       CASE WHEN a.attgenerated = '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END AS default_expr,
       a.attgenerated <> '' AS generated,
       CASE WHEN a.attgenerated <> '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END AS generation_expr,
       a.attidentity::text AS identity,
       CASE WHEN a.attcollation <> t.typcollation AND a.attcollation <> 0 THEN
         (SELECT quote_ident(cn.nspname) || '.' || quote_ident(co.collname)
            FROM pg_catalog.pg_collation co JOIN pg_catalog.pg_namespace cn ON cn.oid = co.collnamespace
           WHERE co.oid = a.attcollation) END AS collation,
       CASE WHEN a.attcollation = 0 THEN NULL
            WHEN a.attcollation = 100 THEN
              (SELECT 'default:' || datcollate FROM pg_catalog.pg_database WHERE datname = current_database())
            ELSE (SELECT co.collname || ':' || coalesce(co.collcollate, '')
                    FROM pg_catalog.pg_collation co WHERE co.oid = a.attcollation) END AS effective_collation,
       t.typtype::text AS typtype, t.typelem::int8 AS typelem,
       coalesce(bt.typtype::text, '') AS base_typtype, coalesce(bt.typelem, 0)::int8 AS base_typelem,
       coalesce(bt.oid, 0)::int8 AS base_oid
  FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_catalog.pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = ANY($1::oid[]) AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attrelid, a.attnum`;

const CONSTRAINTS_SQL = `
SELECT con.conrelid::int8 AS relid, con.conname::text AS name, con.contype::text AS kind,
       pg_catalog.pg_get_constraintdef(con.oid) AS definition,
       CASE WHEN con.contype = 'p' THEN pg_catalog.pg_get_indexdef(con.conindid) END AS index_definition,
       ARRAY(SELECT a.attname::text
               FROM unnest(con.conkey) WITH ORDINALITY k(attnum, ord)
               JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
              ORDER BY k.ord) AS columns,
       rn.nspname::text AS ref_schema, rc.relname::text AS ref_name,
       CASE WHEN rc.oid IS NOT NULL THEN quote_ident(rn.nspname) || '.' || quote_ident(rc.relname) END AS ref_text
  FROM pg_catalog.pg_constraint con
  LEFT JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid
  LEFT JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
 WHERE con.conrelid = ANY($1::oid[])
 ORDER BY con.conrelid, con.conname`;

const INDEXES_SQL = `
SELECT i.indrelid::int8 AS relid, ci.relname::text AS name, pg_catalog.pg_get_indexdef(i.indexrelid) AS definition
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid
 WHERE i.indrelid = ANY($1::oid[])
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint con
                    WHERE con.conindid = i.indexrelid AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u', 'x'))
 ORDER BY i.indrelid, ci.relname`;

// The primary key first (whatever it is: it was always the key), then the narrowest key, a
// constraint before a plain index, by name. A unique index is a key only where each column keeps
// its own collation and its type's default operator class: a coarser equality (a case-insensitive
// collation) would make rows the key tells apart conflict in it.
const KEYS_SQL = `
SELECT i.indrelid::int8 AS relid, coalesce(con.conname, ci.relname)::text AS name,
       CASE WHEN i.indisprimary THEN 'primary key' WHEN con.oid IS NOT NULL THEN 'unique constraint' ELSE 'unique index' END AS kind,
       ARRAY(SELECT a.attname::text
               FROM unnest((i.indkey::int2[])[0:i.indnkeyatts - 1]) WITH ORDINALITY k(attnum, ord)
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              ORDER BY k.ord) AS columns
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid
  LEFT JOIN pg_catalog.pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u')
 WHERE i.indrelid = ANY($1::oid[]) AND i.indisunique AND i.indisvalid
   AND (i.indisprimary OR (i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL
        AND NOT EXISTS (SELECT 1 FROM unnest((i.indkey::int2[])[0:i.indnkeyatts - 1], (i.indcollation::oid[])[0:i.indnkeyatts - 1],
                                             (i.indclass::oid[])[0:i.indnkeyatts - 1]) k(attnum, coll, opclass)
                          JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                          JOIN pg_catalog.pg_opclass oc ON oc.oid = k.opclass
                         WHERE NOT a.attnotnull OR k.coll <> a.attcollation OR NOT oc.opcdefault)))
 ORDER BY i.indrelid, i.indisprimary DESC, i.indnkeyatts, con.oid IS NULL, 2`;

const SEQUENCES_SQL = `
SELECT d.refobjid::int8 AS relid, a.attname::text AS column, sn.nspname::text AS schema, s.relname::text AS name,
       s.oid::regclass::text AS regclass_text, d.deptype = 'i' AS identity,
       pg_catalog.format_type(seq.seqtypid, NULL) AS data_type,
       'INCREMENT BY ' || seq.seqincrement || ' MINVALUE ' || seq.seqmin || ' MAXVALUE ' || seq.seqmax ||
       ' START WITH ' || seq.seqstart || ' CACHE ' || seq.seqcache ||
       CASE WHEN seq.seqcycle THEN ' CYCLE' ELSE ' NO CYCLE' END AS definition
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S'
  JOIN pg_catalog.pg_namespace sn ON sn.oid = s.relnamespace
  JOIN pg_catalog.pg_sequence seq ON seq.seqrelid = s.oid
  JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
 WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
   AND d.refobjid = ANY($1::oid[]) AND d.deptype IN ('a', 'i')
 ORDER BY d.refobjid, a.attnum`;

/** User-defined types reachable from the given type oids (array elements, domain bases), dependencies first. */
const USER_TYPES_SQL = `
WITH RECURSIVE reach(oid) AS (
  SELECT unnest($1::oid[])
  UNION
  SELECT x.dep FROM reach r JOIN pg_catalog.pg_type t ON t.oid = r.oid,
         LATERAL (VALUES (nullif(t.typelem, 0)), (nullif(t.typbasetype, 0))) AS x(dep)
   WHERE x.dep IS NOT NULL
)
SELECT t.oid::int8 AS oid, n.nspname::text AS schema, t.typname::text AS name, t.typtype::text AS kind,
       ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) AS labels,
       CASE WHEN t.typtype = 'd' THEN pg_catalog.format_type(t.typbasetype, t.typtypmod) END AS domain_base,
       t.typnotnull AS domain_not_null, t.typdefault AS domain_default,
       ARRAY(SELECT con.conname::text FROM pg_catalog.pg_constraint con WHERE con.contypid = t.oid ORDER BY con.conname) AS check_names,
       ARRAY(SELECT pg_catalog.pg_get_constraintdef(con.oid) FROM pg_catalog.pg_constraint con WHERE con.contypid = t.oid ORDER BY con.conname) AS check_defs,
       ARRAY(SELECT d::int8 FROM unnest(ARRAY[nullif(t.typelem, 0), nullif(t.typbasetype, 0)]) d WHERE d IS NOT NULL AND d >= 16384) AS depends_on
  FROM reach r
  JOIN pg_catalog.pg_type t ON t.oid = r.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
 WHERE t.oid >= 16384 AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND NOT (t.typelem <> 0 AND t.typlen = -1 AND t.typcategory = 'A')`;

/** Types whose binary COPY form is the same in every PostgreSQL database. */
function isBinaryPortable(row: {
  type_oid: string;
  typtype: string;
  typelem: string;
  base_typtype: string;
  base_typelem: string;
  base_oid: string;
}): boolean {
  const builtin = (oid: string) => Number(oid) < 16384;
  if (row.typtype === 'e') return true;
  if (row.typtype === 'd') {
    return (row.base_typtype === 'b' && builtin(row.base_oid)) || row.base_typtype === 'e';
  }
  if (row.typtype === 'c') return false; // records carry column type oids
  if (row.typtype === 'b' && Number(row.typelem) !== 0) return builtin(row.typelem) && builtin(row.type_oid);
  return builtin(row.type_oid);
}

/** The table, or null when it does not exist (or is not a table). */
export async function readTable(db: ClientBase, name: QualifiedName): Promise<TableInfo | null> {
  return (await readTables(db, [name]))[0];
}

/**
 * The source tables of a plan, read as readTables reads them: a table that is gone refuses the
 * step (MissingTable) instead of coming back null.
 */
export async function readSourceTables(db: ClientBase, names: QualifiedName[]): Promise<TableInfo[]> {
  const infos = await readTables(db, names);
  return infos.map((info, i) => {
    if (!info) throw refusal(FAILURE.MissingTable, `table ${displayQualified(names[i])} disappeared from the source`);
    return info;
  });
}

/**
 * Each table as readTable gives it, in the order asked, in six statements whatever their number:
 * a migration of many tables reads them all in preflight, as it prepares the target and as it
 * finishes it, and five statements per table cost a run of 500 small tables about 9 s at each.
 */
export async function readTables(db: ClientBase, names: QualifiedName[]): Promise<(TableInfo | null)[]> {
  if (names.length === 0) return [];
  const t = await db.query(TABLE_SQL, [names.map((n) => n.schema), names.map((n) => n.name)]);
  const oids = t.rows.map((row) => Number(row.oid));
  const byTable = async (sql: string) => {
    const grouped = new Map<number, QueryResultRow[]>(oids.map((oid) => [oid, []]));
    if (oids.length) for (const row of (await db.query(sql, [oids])).rows) grouped.get(Number(row.relid))?.push(row);
    return grouped;
  };
  const columns = await byTable(COLUMNS_SQL);
  const constraints = await byTable(CONSTRAINTS_SQL);
  const indexes = await byTable(INDEXES_SQL);
  const sequences = await byTable(SEQUENCES_SQL);
  const keys = await byTable(KEYS_SQL);
  const found = new Map(t.rows.map((row) => [Number(row.ord) - 1, row]));
  return names.map((name, i) => {
    const row = found.get(i);
    if (!row) return null;
    const oid = Number(row.oid);
    return tableInfo(name, row, columns.get(oid)!, constraints.get(oid)!, indexes.get(oid)!, sequences.get(oid)!, keys.get(oid)!);
  });
}

function tableInfo(
  name: QualifiedName,
  row: QueryResultRow,
  columns: QueryResultRow[],
  constraints: QueryResultRow[],
  indexes: QueryResultRow[],
  sequences: QueryResultRow[],
  keyRows: QueryResultRow[],
): TableInfo {
  const oid = Number(row.oid);
  const pk = constraints.find((c) => c.kind === 'p');
  const keys: TableKey[] = keyRows.map((k) => ({ kind: k.kind, name: k.name, columns: k.columns }));
  return {
    oid,
    name,
    identText: row.ident_text,
    relkind: row.relkind,
    partitionKey: row.partition_key,
    rowSecurity: row.row_security,
    estimatedRows: Math.round(Number(row.reltuples)),
    pages: Number(row.relpages),
    writes: Number(row.writes),
    inheritsFrom: row.inherits_from,
    inheritedBy: row.inherited_by,
    subscriptions: row.subscriptions,
    columns: columns.map((c) => ({
      name: c.name,
      type: c.type,
      typeOid: Number(c.type_oid),
      notNull: c.not_null,
      defaultExpr: c.default_expr,
      generated: c.generated,
      generationExpr: c.generation_expr,
      identity: c.identity,
      collation: c.collation,
      effectiveCollation: c.effective_collation,
      binaryPortable: isBinaryPortable(c as Parameters<typeof isBinaryPortable>[0]),
    })),
    primaryKey: pk ? { name: pk.name, columns: pk.columns, definition: pk.definition, indexDefinition: pk.index_definition } : null,
    key: keys[0] ?? null,
    keys,
    checks: constraints.filter((c) => c.kind === 'c').map((c) => ({ name: c.name, definition: c.definition })),
    uniques: constraints
      .filter((c) => c.kind === 'u' || c.kind === 'x')
      .map((c) => ({ name: c.name, definition: c.definition })),
    foreignKeys: constraints
      .filter((c) => c.kind === 'f')
      .map((c) => ({
        name: c.name,
        definition: c.definition,
        referenced: { schema: c.ref_schema, name: c.ref_name },
        referencedText: c.ref_text,
      })),
    indexes: indexes.map((i) => ({ name: i.name, definition: i.definition })),
    sequences: sequences.map((s) => ({
      column: s.column,
      name: { schema: s.schema, name: s.name },
      regclassText: s.regclass_text,
      identity: s.identity,
      dataType: s.data_type,
      definition: s.definition,
    })),
  };
}

/** A row estimate: the statistics, or for a never-analysed table a count (small) or a guess from its pages. */
export async function estimateRows(db: ClientBase, info: TableInfo): Promise<number> {
  if (info.estimatedRows >= 0) return info.estimatedRows;
  if (info.pages < 10_000) return Number((await db.query(`SELECT count(*)::int8 AS n FROM ${info.identText}`)).rows[0].n);
  return info.pages * 60;
}

export async function readUserTypes(db: ClientBase, typeOids: number[]): Promise<UserTypeInfo[]> {
  // A built-in type (an oid below FirstNormalObjectId) reaches only built-in types.
  const user = typeOids.filter((oid) => oid >= 16384);
  if (user.length === 0) return [];
  const { rows } = await db.query(USER_TYPES_SQL, [user]);
  const types: UserTypeInfo[] = rows.map((r) => ({
    oid: Number(r.oid),
    name: { schema: r.schema, name: r.name },
    kind: r.kind,
    enumLabels: r.labels,
    domainBase: r.domain_base,
    domainNotNull: r.domain_not_null,
    domainDefault: r.domain_default,
    domainChecks: (r.check_names as string[]).map((name, i) => ({ name, definition: r.check_defs[i] })),
    dependsOn: (r.depends_on as string[]).map(Number),
  }));
  return orderByDependencies(types);
}

function orderByDependencies(types: UserTypeInfo[]): UserTypeInfo[] {
  const byOid = new Map(types.map((t) => [t.oid, t]));
  const ordered: UserTypeInfo[] = [];
  const seen = new Set<number>();
  const visit = (t: UserTypeInfo) => {
    if (seen.has(t.oid)) return;
    seen.add(t.oid);
    for (const dep of t.dependsOn) {
      const d = byOid.get(dep);
      if (d) visit(d);
    }
    ordered.push(t);
  };
  types.forEach(visit);
  return ordered;
}

/** Exists-check for a type by name on the other database. */
export async function typeExists(db: ClientBase, name: QualifiedName): Promise<{ kind: string; labels: string[] } | null> {
  const { rows } = await db.query(
    `SELECT t.typtype::text AS kind,
            ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) AS labels
       FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
      WHERE n.nspname = $1 AND t.typname = $2`,
    [name.schema, name.name],
  );
  return rows[0] ?? null;
}

/**
 * The table's key columns with their types as the catalog has them, never as a plan says:
 * plans come from workflow inputs and bookkeeping rows, and a type name is pasted into SQL
 * (`$1::bigint`). A key column the table no longer has is a changed schema.
 */
export async function withCatalogKeyTypes<T extends { source: QualifiedName; keyColumns: { name: string; type: string; collatable: boolean }[] }>(
  db: ClientBase,
  table: T,
): Promise<T> {
  const { rows } = await db.query(
    `SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type
       FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = to_regclass($1) AND a.attname = ANY ($2::text[]) AND a.attnum > 0 AND NOT a.attisdropped`,
    [quoteQualified(table.source), table.keyColumns.map((k) => k.name)],
  );
  const types = new Map(rows.map((r) => [r.name as string, r.type as string]));
  const keyColumns = table.keyColumns.map((k) => {
    const type = types.get(k.name);
    if (type === undefined) {
      throw ApplicationFailure.nonRetryable(`${displayQualified(table.source)} has no key column "${k.name}" any more`, FAILURE.SchemaChanged);
    }
    return { ...k, type };
  });
  return { ...table, keyColumns };
}

/**
 * Every table a pattern may choose, ordered by schema and name: ordinary and partitioned tables
 * that are not a partition (a partitioned table moves with its partitions), not temporary, not an
 * extension's own, outside PostgreSQL's and Ferry's schemas — one statement for any number.
 */
export async function listTables(db: ClientBase): Promise<QualifiedName[]> {
  const { rows } = await db.query<{ schema: string; name: string }>(
    `SELECT n.nspname AS schema, c.relname AS name
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence <> 't'
        AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE '\\_ferry%'
        AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                         WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
      ORDER BY n.nspname COLLATE "C", c.relname COLLATE "C"`,
  );
  return rows;
}

/** The partitions, at every level, of the partitioned tables among `tables`, by schema and name. */
export async function partitionsOf(db: ClientBase, tables: QualifiedName[]): Promise<QualifiedName[]> {
  if (tables.length === 0) return [];
  const { rows } = await db.query<{ schema: string; name: string }>(
    `WITH RECURSIVE tree AS (
       SELECT i.inhrelid AS oid FROM pg_catalog.pg_inherits i
        WHERE i.inhparent = ANY (SELECT to_regclass(quote_ident(t.schema) || '.' || quote_ident(t.name)) FROM jsonb_to_recordset($1::jsonb) AS t(schema text, name text))
       UNION
       SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid)
     SELECT n.nspname AS schema, c.relname AS name
       FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relispartition
      ORDER BY n.nspname COLLATE "C", c.relname COLLATE "C"`,
    [JSON.stringify(tables)],
  );
  return rows;
}

/** A valid unique index, not partial, whose key columns (by name, sorted: any order) are $2. */
const UNIQUE_INDEX_OVER_SQL = `
SELECT 1 FROM pg_catalog.pg_index i
 WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
   AND ARRAY(SELECT a.attname::text
               FROM unnest((i.indkey::int2[])[0:i.indnkeyatts - 1]) k(attnum)
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
              ORDER BY a.attname COLLATE "C") = $2::text[]`;

/** Whether `table` has a valid unique index, not partial, over exactly `columns`, in any order. */
export async function hasUniqueIndexOver(db: ClientBase, table: QualifiedName, columns: string[]): Promise<boolean> {
  const sorted = [...columns].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return ((await db.query(UNIQUE_INDEX_OVER_SQL, [quoteQualified(table), sorted])).rowCount ?? 0) > 0;
}

/** A table's blocks as ranges of blocks read them (preflight's block chunks, the copy's block batches). */
export interface BlockLayout {
  /** Blocks of the table, of its largest partition for a partitioned one (a TID range applies to each partition's own). */
  blocks: number;
  /** Rows per block number from the catalog's statistics (a TID range reads that block of every partition); 0 when unknown. */
  rowsPerBlock: number;
  /** PostgreSQL 14 or later: a TID range is read by a TID range scan, not by a scan of the whole table. */
  tidRanges: boolean;
}

export async function blockLayout(db: ClientBase, table: QualifiedName): Promise<BlockLayout> {
  const { rows: [row] } = await db.query(
    `SELECT coalesce(max(pg_catalog.pg_relation_size(t.relid)), 0) / current_setting('block_size')::int8 AS blocks,
            coalesce(sum(greatest(c.reltuples, 0)) / nullif(max(c.relpages), 0), 0)::float8 AS rows_per_block,
            current_setting('server_version_num')::int >= 140000 AS tid_ranges
       FROM (SELECT $1::regclass AS relid UNION SELECT relid FROM pg_catalog.pg_partition_tree($1::regclass) WHERE isleaf) t
       JOIN pg_catalog.pg_class c ON c.oid = t.relid AND c.relkind = 'r'`,
    [quoteQualified(table)],
  );
  return { blocks: Number(row.blocks), rowsPerBlock: Number(row.rows_per_block), tidRanges: row.tid_ranges };
}
