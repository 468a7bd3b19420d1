/**
 * checkDirtyKeys: online mode's re-check of the keys applied since a table's validation began
 * (the dirty set), a page at a time. In one source snapshot per page, keys still waiting in the
 * change log are skipped; every other dirty key's row is compared, source against target, by
 * its full text. Matching keys leave the dirty set; differing ones go back into the log for the
 * sync to repair. Before cutover (source frozen, log drained) this is the final proof, and its
 * cost follows the number of changed rows, not the size of the table.
 */
import { Context } from '@temporalio/activity';
import { ClientBase } from 'pg';
import { SYNC_CHUNK } from '../src/db/bookkeeping';
import { withFencedSessions } from '../src/db/fenced';
import { withCatalogKeyTypes } from '../src/db/catalog';
import { quotedLog } from '../src/db/capture-sql';
import { selectColumns } from '../src/db/copy-stream';
import type { CopyTable } from '../src/core/plan';
import { keyAsText, keyFromRow, keyInList, ParamBinder } from '../src/db/ranges';
import { QualifiedName, quoteQualified } from '../src/core/identifiers';
import { Key } from '../src/core/plan';
import { ActivityDeps } from './deps';
import { enqueue, keysFromJson } from '../src/db/change-log';
import type { CheckDirtyInput, CheckDirtyResult } from '../src/core/sync-types';

export type { CheckDirtyInput, CheckDirtyResult } from '../src/core/sync-types';

async function rowsByKey(db: ClientBase, table: CopyTable, relation: QualifiedName, keys: Key[]): Promise<Map<string, string>> {
  const binder = new ParamBinder();
  const { rows } = await db.query(
    `SELECT ${keyAsText(table)}, ROW(${selectColumns(table)})::text AS row FROM ${quoteQualified(relation)} AS t WHERE ${keyInList(table, keys, binder)}`,
    binder.params,
  );
  return new Map(rows.map((r) => [JSON.stringify(keyFromRow(r, table)), r.row as string]));
}

/** Dirty keys a check clears before it vacuums the dirty set. */
const VACUUM_DIRTY_AFTER = 50_000;

/** A page's writes (the matching keys cleared, the differing ones queued again) in one go. */
type PageWrite = <T>(work: () => Promise<T>) => Promise<T>;

export function createCheckDirty({ connections }: ActivityDeps) {
  /**
   * With a fence (a table's own re-check, PATCHES.sealedDrain), each page's writes run under
   * the table's sync fence: once the cutover's drain has taken it, the re-check stops before
   * it writes again, and what it queued before is in the log the drain applies.
   */
  return async function checkDirtyKeys(input: CheckDirtyInput): Promise<CheckDirtyResult> {
    if (input.fence === undefined) {
      return connections.withSessions([input.source, input.target], undefined, async (source, target) =>
        checkPages({ ...input, table: await withCatalogKeyTypes(source, input.table) }, source, target, (work) => work()),
      );
    }
    return withFencedSessions(connections, { ...input, fence: input.fence }, SYNC_CHUNK, (sessions) =>
      checkPages({ ...input, table: sessions.table }, sessions.source, sessions.target, sessions.write),
    );
  };

  /** The check, page by page; `input.table` has its key types from the catalog, not the plan. */
  async function checkPages(input: CheckDirtyInput, source: ClientBase, target: ClientBase, write: PageWrite): Promise<CheckDirtyResult> {
    const ctx = Context.current();
    const batchKeys = input.batchKeys ?? 5000;
    const log = quotedLog(input.migrationId, input.table.index);
    const result: CheckDirtyResult = { checked: 0, mismatched: 0, waiting: 0, remaining: 0 };
    let after: Key | null = null;
    for (;;) {
      const page: { rows: { pk: Key }[] } = await target.query(
        `SELECT pk FROM _ferry.dirty WHERE migration_id = $1 AND table_index = $2 AND ($3::text[] IS NULL OR pk > $3::text[])
          ORDER BY pk LIMIT ${batchKeys}`,
        [input.migrationId, input.table.index, after],
      );
      if (page.rows.length === 0) break;
      after = page.rows[page.rows.length - 1].pk;
      // One source snapshot per page, never one for the whole check: the log and the source
      // rows are read in the same one (a key waiting in the log is skipped), and a check of a
      // million keys (after a large backlog) does not hold back the source's vacuum for as
      // long as it runs.
      await source.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const waiting = await source.query(`SELECT DISTINCT pk FROM ${log} WHERE pk IN (${keysFromJson('$1')})`, [JSON.stringify(page.rows.map((r) => r.pk))]);
      const waitingKeys = new Set(waiting.rows.map((r) => JSON.stringify(r.pk)));
      const keys = page.rows.map((r) => r.pk).filter((k) => !waitingKeys.has(JSON.stringify(k)));
      result.waiting += page.rows.length - keys.length;
      const [theirs, ours] = keys.length === 0 ? [new Map(), new Map()] : await Promise.all([rowsByKey(source, input.table, input.table.source, keys), rowsByKey(target, input.table, input.table.target, keys)]);
      await source.query('COMMIT');
      if (keys.length === 0) continue;
      const differing = keys.filter((k) => theirs.get(JSON.stringify(k)) !== ours.get(JSON.stringify(k)));
      const matching = keys.filter((k) => theirs.get(JSON.stringify(k)) === ours.get(JSON.stringify(k)));
      await write(async () => {
        await target.query(
          `DELETE FROM _ferry.dirty WHERE migration_id = $1 AND table_index = $2
              AND pk IN (${keysFromJson('$3')})`,
          [input.migrationId, input.table.index, JSON.stringify(matching)],
        );
        // A separate connection, as ever (the page's snapshot transaction has ended by now).
        if (differing.length > 0) await connections.withClient(input.source, (db) => enqueue(db, log, differing));
      });
      result.checked += keys.length;
      result.mismatched += differing.length;
      ctx.heartbeat(result);
    }
    // The keys just cleared (checked and matching) leave dead rows in front of the next pass's reads (as a drained
    // change log does, see VACUUM_LOG_AFTER): many of them, and they go at once.
    if (result.checked - result.mismatched >= VACUUM_DIRTY_AFTER) await target.query('VACUUM (SKIP_LOCKED) _ferry.dirty');
    const left = await target.query('SELECT count(*)::int AS n FROM _ferry.dirty WHERE migration_id = $1 AND table_index = $2', [input.migrationId, input.table.index]);
    result.remaining = left.rows[0].n;
    return result;
  }
}
