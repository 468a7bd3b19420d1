/**
 * Key-range predicates over a (possibly composite) primary key, as row comparisons that use the
 * primary-key index: `("a", "b") > ($1::integer, $2::text)`. Values bind as parameters for
 * ordinary queries, or as quoted literals inside COPY (which takes no parameters).
 */
import { escapeLiteral } from 'pg';
import { quoteIdent } from '../identifiers';
import { Key, KeyColumn, KeyRange } from '../plan';

export type Comparison = '>' | '>=' | '<' | '<=';

export interface Bound {
  op: Comparison;
  key: Key;
}

export interface KeyShape {
  keyColumns: KeyColumn[];
  keyCollateC: boolean;
}

/** Turns a text value into SQL: a placeholder (collecting params) or an escaped literal. */
export interface Binder {
  bind(value: string, type: string): string;
}

export class ParamBinder implements Binder {
  readonly params: string[] = [];
  bind(value: string, type: string): string {
    this.params.push(value);
    return `$${this.params.length}::${type}`;
  }
}

export const literalBinder: Binder = {
  bind: (value, type) => `${escapeLiteral(value).trim()}::${type}`,
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

/** `("a", "b") IN ((…), (…))` for a list of whole keys (equality needs no collation). */
export function keyInList(shape: KeyShape, keys: Key[], binder: Binder): string {
  if (keys.length === 0) return 'FALSE';
  const cols = shape.keyColumns.map((c) => quoteIdent(c.name));
  const lhs = cols.length === 1 ? cols[0] : `(${cols.join(', ')})`;
  const values = keys.map((key) => {
    const parts = key.map((v, i) => binder.bind(v, shape.keyColumns[i].type));
    return parts.length === 1 ? parts[0] : `(${parts.join(', ')})`;
  });
  return `${lhs} IN (${values.join(', ')})`;
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
