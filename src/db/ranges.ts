/**
 * Key-range predicates over a (possibly composite) primary key, as row comparisons that use the
 * primary-key index: `("a", "b") > ($1::integer, $2::text)`. Values bind as parameters for
 * ordinary queries, or as quoted literals inside COPY (which takes no parameters).
 */
import { escapeLiteral } from 'pg';
import { quoteIdent } from '../core/identifiers';
import { Key, KeyColumn, KeyRange } from '../core/plan';

export type Comparison = '>' | '>=' | '<' | '<=';

export interface Bound {
  op: Comparison;
  key: Key;
}

export interface KeyShape {
  keyColumns: KeyColumn[];
  keyCollateC: boolean;
}

/** Turns text values into SQL: placeholders (collecting params) or escaped literals. */
export interface Binder {
  bind(value: string, type: string): string;
  /** A whole array in one value: one literal to parse instead of thousands. */
  bindArray(values: string[], elementType: string): string;
}

export class ParamBinder implements Binder {
  readonly params: (string | string[])[] = [];
  bind(value: string, type: string): string {
    this.params.push(value);
    return `$${this.params.length}::${type}`;
  }
  bindArray(values: string[], elementType: string): string {
    this.params.push(values);
    return `$${this.params.length}::${elementType}[]`;
  }
}

/** PostgreSQL's text form of an array of non-null text values. */
export function arrayLiteral(values: string[]): string {
  return `{${values.map((v) => `"${v.replace(/[\\"]/g, (c) => `\\${c}`)}"`).join(',')}}`;
}

export const literalBinder: Binder = {
  bind: (value, type) => `${escapeLiteral(value).trim()}::${type}`,
  bindArray: (values, elementType) => `${escapeLiteral(arrayLiteral(values)).trim()}::${elementType}[]`,
};

function keyExpression(shape: KeyShape, alias?: string): string {
  const cols = shape.keyColumns.map((c) => {
    const ref = alias ? `${alias}.${quoteIdent(c.name)}` : quoteIdent(c.name);
    return shape.keyCollateC && c.collatable ? `${ref} COLLATE "C"` : ref;
  });
  return cols.length === 1 ? cols[0] : `(${cols.join(', ')})`;
}

/** `ORDER BY` list for the key, in the comparison's collation. */
export function keyOrder(shape: KeyShape, direction: 'ASC' | 'DESC' = 'ASC'): string {
  return shape.keyColumns
    .map((c) => `${quoteIdent(c.name)}${shape.keyCollateC && c.collatable ? ' COLLATE "C"' : ''} ${direction}`)
    .join(', ');
}

/** The key columns as text, for reading key values back. */
export function keyAsText(shape: KeyShape): string {
  return shape.keyColumns.map((c, i) => `${quoteIdent(c.name)}::text AS k${i}`).join(', ');
}

export function keyFromRow(row: Record<string, string>, shape: KeyShape): Key {
  return shape.keyColumns.map((_, i) => row[`k${i}`]);
}

/** A conjunction of bounds on the key; `TRUE` when there are none. */
export function keyPredicate(shape: KeyShape, bounds: Bound[], binder: Binder, alias?: string): string {
  if (bounds.length === 0) return 'TRUE';
  const expr = keyExpression(shape, alias);
  return bounds
    .map(({ op, key }) => {
      if (key.length !== shape.keyColumns.length) throw new Error('key has the wrong number of columns');
      const values = key.map((v, i) => binder.bind(v, shape.keyColumns[i].type));
      const rhs = values.length === 1 ? values[0] : `(${values.join(', ')})`;
      return `${expr} ${op} ${rhs}`;
    })
    .join(' AND ');
}

/** Bounds of a half-open range [lower, upper). */
export function rangeBounds(range: KeyRange): Bound[] {
  const bounds: Bound[] = [];
  if (range.lower) bounds.push({ op: '>=', key: range.lower });
  if (range.upper) bounds.push({ op: '<', key: range.upper });
  return bounds;
}

/**
 * Membership in a list of whole keys, with the list bound as one array per key column:
 * `"id" = ANY ($1::bigint[])`, or for composite keys
 * `("a", "b") IN (SELECT * FROM unnest($1::integer[], $2::text[]))`. Equality needs no collation.
 */
export function keyInList(shape: KeyShape, keys: Key[], binder: Binder): string {
  if (keys.length === 0) return 'FALSE';
  const columns = shape.keyColumns.map((c, i) => binder.bindArray(keys.map((k) => k[i]), c.type));
  if (columns.length === 1) return `${quoteIdent(shape.keyColumns[0].name)} = ANY (${columns[0]})`;
  return `(${shape.keyColumns.map((c) => quoteIdent(c.name)).join(', ')}) IN (SELECT * FROM unnest(${columns.join(', ')}))`;
}

/** Distinct keys, first occurrence order. */
export function distinctKeys(keys: Key[]): Key[] {
  const seen = new Set<string>();
  return keys.filter((k) => {
    const id = JSON.stringify(k);
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}

/**
 * The rows in blocks [first, last) of a relation (last null: to its end), as a TID range: read
 * by a TID range scan (PostgreSQL 14 and later; before, by a scan of the whole relation).
 */
export function blockPredicate(first: number, last: number | null): string {
  if (!Number.isSafeInteger(first) || first < 0 || (last !== null && (!Number.isSafeInteger(last) || last < first))) {
    throw new Error(`bad block range [${first}, ${last})`);
  }
  return `ctid >= '(${first},0)'::tid` + (last === null ? '' : ` AND ctid < '(${last},0)'::tid`);
}
