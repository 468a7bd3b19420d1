/**
 * Names and SQL of a rewrite step (docs/architecture.md §10, "Rewrite"): the shadow table, the
 * old table's name after the swap, the column mapping of the copy, and the batch statements of
 * the copy, the sync and the validation. Pure module: the catalog facts come in as arguments.
 */
import { migrationTag } from '../db/capture-sql';
import { QualifiedName, quoteIdent, quoteQualified, withSuffix } from '../core/identifiers';
import { INTEGER_TYPES, KeyColumn } from '../core/plan';
import { rewriteCaptureId } from '../core/change-plan';

export { rewriteCaptureId };

export function rewriteTag(changeId: string, step: number): string {
  return migrationTag(rewriteCaptureId(changeId, step)).slice(0, 8);
}

export interface RewriteNames {
  shadow: QualifiedName;
  old: QualifiedName;
  /** Prefix of the shadow's index names (`<prefix><original index oid>`) until the swap renames them. */
  indexPrefix: string;
}

export function rewriteNames(table: QualifiedName, tag: string): RewriteNames {
  return {
    shadow: { schema: table.schema, name: withSuffix(table.name, `_ferry_new_${tag}`) },
    old: { schema: table.schema, name: withSuffix(table.name, `_ferry_old_${tag}`) },
    indexPrefix: `ferry_new_${tag}_`,
  };
}

/** One column the copy writes: the shadow's column and the expression over the original row. */
export interface ColumnMapping {
  column: string;
  /** format_type() of the shadow column: the validation casts the expression to it. */
  type: string;
  expression: string;
}

/** The key of both tables; its type may differ (int → bigint), its column names may not. */
export interface RewriteKey {
  columns: KeyColumn[];
  /** format_type() of each key column in the shadow. */
  shadowTypes: string[];
}

function insertSelect(shadow: QualifiedName, original: QualifiedName, mapping: ColumnMapping[], alias: string): string {
  const columns = mapping.map((m) => quoteIdent(m.column)).join(', ');
  const values = mapping.map((m) => `(${m.expression})`).join(', ');
  // The expressions are written over the original's columns, unqualified: the FROM item keeps
  // the table's own name as its alias only through `AS`, so `o.` never appears in them.
  return `INSERT INTO ${quoteQualified(shadow)} (${columns}) OVERRIDING SYSTEM VALUE SELECT ${values} FROM ${quoteQualified(original)} AS ${alias}`;
}

const keyList = (key: RewriteKey, alias: string) => key.columns.map((k) => `${alias}.${quoteIdent(k.name)}`).join(', ');
const keyParams = (key: RewriteKey, from: number) => key.columns.map((k, i) => `$${from + i}::${k.type}`).join(', ');

/**
 * A copy batch: the next `limit` rows after the last key copied (keyset order), inserted through
 * the expressions; rows a killed attempt committed already are skipped. Returns the batch's
 * last key as text (null when nothing was left) and the rows it read. `$1` is the limit, then
 * the last key's columns (absent for the first batch).
 */
export function copyBatchSql(original: QualifiedName, shadow: QualifiedName, mapping: ColumnMapping[], key: RewriteKey, first: boolean): string {
  const k = keyList(key, 'o');
  const where = first ? '' : `WHERE (${k}) > (${keyParams(key, 2)})`;
  const batch = `SELECT ${k} FROM ${quoteQualified(original)} AS o ${where} ORDER BY ${k} LIMIT $1`;
  const match = key.columns.map((c) => `o.${quoteIdent(c.name)} = b.${quoteIdent(c.name)}`).join(' AND ');
  const lastKey = `ARRAY[${key.columns.map((c) => `b.${quoteIdent(c.name)}::text`).join(', ')}]`;
  return `WITH b AS MATERIALIZED (${batch}),
ins AS (${insertSelect(shadow, original, mapping, 'o')} WHERE EXISTS (SELECT 1 FROM b WHERE ${match}) ON CONFLICT DO NOTHING RETURNING 1)
SELECT (SELECT ${lastKey} FROM b ORDER BY ${key.columns.map((c) => `b.${quoteIdent(c.name)}`).join(' DESC, ')} DESC LIMIT 1) AS last_key,
       (SELECT count(*) FROM b)::int AS read, (SELECT count(*) FROM ins)::int AS inserted`;
}

/** The log's keys (text[]) matched against a table's key columns, cast to that table's types. */
function logMatch(key: RewriteKey, alias: string, types: string[]): string {
  return key.columns.map((k, i) => `${alias}.${quoteIdent(k.name)} = (l.pk[${i + 1}])::${types[i]}`).join(' AND ');
}

/**
 * A sync batch, as three statements in one transaction (`$1`: the log ids taken): the shadow's
 * rows of those keys go, the original's current rows come back through the expressions, and
 * exactly those log ids are deleted. A write committed meanwhile logs a new id: the next batch.
 */
export function syncBatchSql(original: QualifiedName, shadow: QualifiedName, log: QualifiedName, mapping: ColumnMapping[], key: RewriteKey): string[] {
  const l = quoteQualified(log);
  return [
    `DELETE FROM ${quoteQualified(shadow)} AS s USING ${l} AS l WHERE l.id = ANY ($1::int8[]) AND ${logMatch(key, 's', key.shadowTypes)}`,
    `${insertSelect(shadow, original, mapping, 'o')} WHERE EXISTS (SELECT 1 FROM ${l} AS l WHERE l.id = ANY ($1::int8[]) AND ${logMatch(
      key,
      'o',
      key.columns.map((c) => c.type),
    )})`,
    `DELETE FROM ${l} WHERE id = ANY ($1::int8[])`,
  ];
}

/**
 * A revert batch (`$1`: the log ids taken): the writes logged on the new table since the swap,
 * carried back to the old one. Rows gone from the new table go from the old one; the others are
 * upserted through the casts back, so the old table's columns the new one lacks keep their
 * values (a row new since the swap gets their defaults); then exactly those log ids go. The
 * key's `columns` carry the new table's types, `shadowTypes` the old one's.
 */
export function revertBatchSql(now: QualifiedName, old: QualifiedName, log: QualifiedName, mapping: ColumnMapping[], key: RewriteKey): string[] {
  const l = quoteQualified(log);
  const sameKey = key.columns.map((k) => `n.${quoteIdent(k.name)} = s.${quoteIdent(k.name)}`).join(' AND ');
  const keys = key.columns.map((k) => quoteIdent(k.name)).join(', ');
  // Key columns too, unless integers: a key changed to an equal but different value (numeric 1.0
  // to 1.00) conflicts with its old form and must still arrive, as in a migration's sync.
  const settable = (column: string) => !key.columns.some((k) => k.name === column && INTEGER_TYPES.has(k.type));
  const updated = mapping.filter((m) => settable(m.column)).map((m) => `${quoteIdent(m.column)} = EXCLUDED.${quoteIdent(m.column)}`);
  const conflict = updated.length ? `DO UPDATE SET ${updated.join(', ')}` : 'DO NOTHING';
  return [
    `DELETE FROM ${quoteQualified(old)} AS s USING ${l} AS l WHERE l.id = ANY ($1::int8[]) AND ${logMatch(key, 's', key.shadowTypes)}
        AND NOT EXISTS (SELECT 1 FROM ${quoteQualified(now)} AS n WHERE ${sameKey})`,
    `${insertSelect(old, now, mapping, 'o')} WHERE EXISTS (SELECT 1 FROM ${l} AS l WHERE l.id = ANY ($1::int8[]) AND ${logMatch(
      key,
      'o',
      key.columns.map((c) => c.type),
    )}) ON CONFLICT (${keys}) ${conflict}`,
    `DELETE FROM ${l} WHERE id = ANY ($1::int8[])`,
  ];
}

/**
 * Count and checksum of the original through the expressions and of the shadow, keys waiting in
 * the log left out (their rows are about to be replaced): run in one REPEATABLE READ snapshot,
 * where every other key's shadow row must equal its transformed original row.
 */
export function checksumSql(original: QualifiedName, shadow: QualifiedName, log: QualifiedName, mapping: ColumnMapping[], key: RewriteKey): { original: string; shadow: string } {
  const notLogged = (alias: string) =>
    `NOT EXISTS (SELECT 1 FROM ${quoteQualified(log)} AS l WHERE l.pk = ARRAY[${key.columns.map((k) => `${alias}.${quoteIdent(k.name)}::text`).join(', ')}])`;
  const sum = (row: string) => `SELECT count(*)::int8 AS rows, coalesce(sum(hashtextextended((${row})::text, 0)::numeric), 0)::text AS checksum`;
  const transformed = `ROW(${mapping.map((m) => `CAST((${m.expression}) AS ${m.type})`).join(', ')})`;
  const stored = `ROW(${mapping.map((m) => `s.${quoteIdent(m.column)}`).join(', ')})`;
  return {
    original: `${sum(transformed)} FROM ${quoteQualified(original)} AS o WHERE ${notLogged('o')}`,
    shadow: `${sum(stored)} FROM ${quoteQualified(shadow)} AS s WHERE ${notLogged('s')}`,
  };
}
