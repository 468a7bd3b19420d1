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

const PENDING_COUNT_CAP = 1_000_000;

/** What a log still holds (counted up to PENDING_COUNT_CAP) and the age of its oldest change. */
export async function logLag(source: ClientBase, log: string): Promise<{ pending: number; lagSeconds: number }> {
  const lag = await source.query(
    `SELECT (SELECT count(*) FROM (SELECT 1 FROM ${log} LIMIT ${PENDING_COUNT_CAP}) s)::int AS pending,
            coalesce(extract(epoch FROM clock_timestamp() - (SELECT logged_at FROM ${log} ORDER BY id LIMIT 1)), 0)::float8 AS lag`,
  );
  return { pending: Number(lag.rows[0].pending), lagSeconds: Math.round(Number(lag.rows[0].lag) * 1000) / 1000 };
}
