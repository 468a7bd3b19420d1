/**
 * Unique and exclusion indexes other than the primary key, as the online apply meets them on
 * the target. A live sync replays changes key by key, so the target can hold a stale row whose
 * unique value another row now takes (two rows swapping e-mails in one transaction, applied in
 * two batches). Rather than fail, the apply evicts the stale row and replays it from the source
 * too — replaying is always safe, since the sync is state-based.
 *
 * Index expressions come from pg_get_indexdef, which never qualifies a column: the queries
 * below place them so that each resolves against the intended relation (a derived table with
 * other column names in between), rather than rewriting SQL text.
 */
import { ClientBase } from 'pg';
import { quoteQualified, QualifiedName } from '../core/identifiers';
import { KeyShape, keyAsText } from './ranges';

export interface UniqueKey {
  name: string;
  /** Key expressions (a quoted column name, or an expression), in index order. */
  expressions: string[];
  /** `=`, or an exclusion constraint's operator as OPERATOR(schema.op). */
  operators: string[];
  /** The partial index's predicate, or null. */
  predicate: string | null;
  /** NULLS NOT DISTINCT: two NULLs conflict. */
  nullsNotDistinct: boolean;
  /** The plain columns among its key expressions that keep their own collation and default operator class. */
  columns: string[];
  primary: boolean;
  /** Checked at each row, not deferred to the commit: only such an index can arbitrate ON CONFLICT. */
  immediate: boolean;
}

const UNIQUE_KEYS_SQL = `
SELECT ci.relname::text AS name,
       ARRAY(SELECT pg_catalog.pg_get_indexdef(i.indexrelid, k, false) FROM generate_series(1, i.indnkeyatts) k) AS expressions,
       CASE WHEN con.contype = 'x' THEN
         ARRAY(SELECT format('OPERATOR(%I.%s)', n.nspname, o.oprname)
                 FROM unnest(con.conexclop) WITH ORDINALITY AS x(op, ord)
                 JOIN pg_catalog.pg_operator o ON o.oid = x.op JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
                ORDER BY x.ord) END AS operators,
       pg_catalog.pg_get_expr(i.indpred, i.indrelid) AS predicate,
       coalesce((to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false) AS nulls_not_distinct,
       ARRAY(SELECT a.attname::text
               FROM unnest((i.indkey::int2[])[0:i.indnkeyatts - 1], (i.indcollation::oid[])[0:i.indnkeyatts - 1],
                           (i.indclass::oid[])[0:i.indnkeyatts - 1]) k(attnum, coll, opclass)
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
               JOIN pg_catalog.pg_opclass oc ON oc.oid = k.opclass
              WHERE k.coll = a.attcollation AND oc.opcdefault) AS columns,
       i.indisprimary AS is_primary, i.indimmediate AS immediate
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid
  LEFT JOIN pg_catalog.pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid
 WHERE i.indrelid = to_regclass($1) AND i.indisready
   AND (i.indisunique OR con.contype = 'x')
 ORDER BY ci.relname`;

/**
 * The target table's unique and exclusion indexes besides the primary key; with `key` (the
 * columns the table is moved by), those besides any that only restates the key — a unique index
 * over the key's columns and maybe more, whole, by equality, each column in its own collation and
 * default operator class, which no row can break without breaking the key (the key's own index,
 * primary or not, among them; not a DEFERRABLE one, which ON CONFLICT cannot arbitrate). A
 * primary key that is not over the key is kept then: it can conflict on its own (a target
 * prepared with another primary key and the key as a unique index).
 */
export async function readUniqueKeys(db: ClientBase, table: QualifiedName, key?: string[]): Promise<UniqueKey[]> {
  const { rows } = await db.query(UNIQUE_KEYS_SQL, [quoteQualified(table)]);
  const found: UniqueKey[] = rows.map((r) => ({
    name: r.name,
    expressions: r.expressions,
    operators: r.operators ?? r.expressions.map(() => '='),
    predicate: r.predicate,
    nullsNotDistinct: r.nulls_not_distinct,
    columns: r.columns,
    primary: r.is_primary,
    immediate: r.immediate,
  }));
  if (key === undefined || key.length === 0) return found.filter((u) => !u.primary);
  // A DEFERRABLE key is kept: ON CONFLICT cannot name it, so the apply deletes and inserts.
  const restatesKey = (u: UniqueKey) => u.immediate && u.predicate === null && u.operators.every((o) => o === '=') && key.every((c) => u.columns.includes(c));
  return found.filter((u) => !restatesKey(u));
}

const value = (i: number) => `"ferry$v${i}"`;

/**
 * Deletes the rows of `table` that conflict with a row of `stage` under `key`, returning their
 * primary keys as text (k0, k1, …). Inside the EXISTS, the derived table `s` has only ferry$v…
 * columns, so the bare expressions after the operators resolve against `table`.
 */
export function evictConflictsSql(table: QualifiedName, stage: string, key: UniqueKey, shape: KeyShape): string {
  const staged = key.expressions.map((e, i) => `${e} AS ${value(i)}`).join(', ');
  const matches = key.expressions
    .map((e, i) => {
      if (key.operators[i] !== '=') return `s.${value(i)} ${key.operators[i]} (${e})`;
      return key.nullsNotDistinct ? `s.${value(i)} IS NOT DISTINCT FROM (${e})` : `s.${value(i)} = (${e})`;
    })
    .join(' AND ');
  const where = key.predicate ? ` WHERE ${key.predicate}` : '';
  const own = key.predicate ? ` AND (${key.predicate})` : '';
  return `DELETE FROM ${quoteQualified(table)} WHERE EXISTS (SELECT 1 FROM (SELECT ${staged} FROM ${stage}${where}) s WHERE ${matches})${own}
    RETURNING ${keyAsText(shape)}`;
}

/**
 * Primary keys of the rows that share a value of a unique key with another row (the groups a
 * CREATE UNIQUE INDEX would refuse). NULLs never conflict unless NULLS NOT DISTINCT.
 */
export function duplicateKeysSql(table: QualifiedName, key: UniqueKey, shape: KeyShape): string {
  const values = key.expressions.map((e, i) => `${e} AS ${value(i)}`).join(', ');
  const group = key.expressions.map((_, i) => value(i)).join(', ');
  const conditions = [key.predicate, ...(key.nullsNotDistinct ? [] : key.expressions.map((e) => `(${e}) IS NOT NULL`))].filter(Boolean);
  const where = conditions.length ? ` WHERE ${conditions.join(' AND ')}` : '';
  const keys = shape.keyColumns.map((_, i) => `k${i}`).join(', ');
  return `SELECT ${keys} FROM (
      SELECT ${keyAsText(shape)}, count(*) OVER (PARTITION BY ${group}) AS n FROM (SELECT *, ${values} FROM ${quoteQualified(table)}${where}) t
    ) d WHERE n > 1`;
}
