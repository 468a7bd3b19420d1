/** Whether an index is the one an index step asks for: read by preflight, by the step and by its undo. */
import { ClientBase } from 'pg';
import type { IndexStep } from '../core/change-plan';

/**
 * How an index of the step's name differs from what the step asks for — uniqueness, access
 * method, key columns in order (an expression or INCLUDE column counts as a difference), a
 * predicate or none — or undefined when it does not. A predicate's text is not compared: one
 * written otherwise may mean the same.
 */
export async function indexDifference(db: Pick<ClientBase, 'query'>, index: number, step: Pick<IndexStep, 'columns' | 'unique' | 'using' | 'where'>): Promise<string | undefined> {
  const { rows } = await db.query(
    `SELECT i.indisunique AS unique, am.amname::text AS method, i.indnatts = i.indnkeyatts AS no_include, i.indpred IS NOT NULL AS partial,
            array(SELECT coalesce(a.attname::text, '(expression)') FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
                    LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0 ORDER BY k.n) AS columns,
            pg_catalog.pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid JOIN pg_catalog.pg_am am ON am.oid = c.relam
      WHERE i.indexrelid = $1`,
    [index],
  );
  const r = rows[0];
  if (!r) return undefined;
  const same =
    r.unique === Boolean(step.unique) &&
    r.method === step.using &&
    r.no_include &&
    r.partial === (step.where !== undefined) &&
    JSON.stringify(r.columns) === JSON.stringify(step.columns);
  return same ? undefined : `it is ${r.definition}`;
}
