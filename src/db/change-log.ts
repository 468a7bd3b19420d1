/**
 * Keys into a change log (and into the target's dirty set): keys travel as one JSON parameter,
 * an array of keys each an array of the key columns' text, and become the text[] the logs hold.
 */
import { ClientBase } from 'pg';
import type { Key } from '../core/plan';

/** A subquery of text[] keys from `param`, a JSON array of keys (e.g. `$1`). */
export function keysFromJson(param: string): string {
  return `SELECT ARRAY(SELECT jsonb_array_elements_text(k)) FROM jsonb_array_elements(${param}::jsonb) AS k`;
}

/** Puts `keys` into `log` (a quoted table name) for the sync to re-apply. */
export async function enqueue(db: ClientBase, log: string, keys: Key[]): Promise<void> {
  if (keys.length === 0) return;
  await db.query(`INSERT INTO ${log} (pk) ${keysFromJson('$1')}`, [JSON.stringify(keys)]);
}
