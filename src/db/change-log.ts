/**
 * Keys into a change log (and into the target's dirty set): keys travel as one JSON parameter,
 * an array of keys each an array of the key columns' text, and become the text[] the logs hold.
 */
import { ClientBase } from 'pg';
import type { Key } from '../core/plan';
import { quotedLog } from './capture-sql';

/** A subquery of text[] keys from `param`, a JSON array of keys (e.g. `$1`). */
export function keysFromJson(param: string): string {
  return `SELECT ARRAY(SELECT jsonb_array_elements_text(k)) FROM jsonb_array_elements(${param}::jsonb) AS k`;
}

/** Puts `keys` into `log` (a quoted table name) for the sync to re-apply. */
export async function enqueue(db: ClientBase, log: string, keys: Key[]): Promise<void> {
  if (keys.length === 0) return;
  await db.query(`INSERT INTO ${log} (pk) ${keysFromJson('$1')}`, [JSON.stringify(keys)]);
}

/** The tables among `tableIndexes` whose change log holds anything, in one statement. */
export async function tablesWithChanges(db: ClientBase, migrationId: string, tableIndexes: number[]): Promise<number[]> {
  if (tableIndexes.length === 0) return [];
  const looks = tableIndexes.map((index) => `SELECT ${Number(index)} AS idx WHERE EXISTS (SELECT 1 FROM ${quotedLog(migrationId, index)})`);
  const { rows } = await db.query(looks.join('\nUNION ALL\n'));
  return rows.map((r) => r.idx as number);
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

/** How often a sync looks at a log that had nothing to apply. */
export const POLL_MS = 500;

/**
 * Log rows a slice deletes before it vacuums the log itself. Every round reads the oldest rows
 * through the log's key, so the index entries of rows already applied and deleted lie in front
 * of it until a vacuum removes them: after a drained backlog of half a million rows, rounds read
 * about 1,600 index pages to find a few hundred rows (60 ms a round), and the lag readings and
 * pending counts paid the same, until autovacuum came round to the table.
 */
const VACUUM_LOG_AFTER = 50_000;

/**
 * After a slice deleted `deleted` more log rows: the log vacuumed once VACUUM_LOG_AFTER of them
 * have gone since its last vacuum. Returns the rows deleted since the last vacuum.
 */
export async function vacuumLogWhenDue(source: ClientBase, log: string, deletedSinceVacuum: number): Promise<number> {
  if (deletedSinceVacuum < VACUUM_LOG_AFTER) return deletedSinceVacuum;
  // SKIP_LOCKED: never queue behind another vacuum of it (autovacuum, say).
  await source.query(`VACUUM (SKIP_LOCKED) ${log}`);
  return 0;
}
