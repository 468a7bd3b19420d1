/**
 * restoreObjects: the second pass of `objects: all` (src/db/object-passes.ts), once the tables
 * are loaded. It records what it created for rollback, by address, in the transaction that
 * creates it.
 */
import { ClientBase } from 'pg';
import { tablesOrStored } from '../src/db/stored-plan';
import { ObjectsPlan, TablePlan } from '../src/core/plan';
import { createdObjectsRecorder } from '../src/db/bookkeeping';
import { inTransaction } from '../src/db/connections';
import { refusal } from '../src/db/errors';
import { FAILURE } from '../src/core/failure-types';
import { entryStatements, restorePass, sourceTables } from '../src/db/object-passes';
import { tableOfContents, TocEntry, withDump } from '../src/db/schema-dump';
import { materializedViews, ObjectAddress, objectPasses, tablePropertyStatements } from '../src/db/schema-objects';
import { DEFAULT_TIMEOUTS } from '../src/db/session';
import { ActivityDeps } from './deps';

/**
 * The marks a second pass leaves in `_ferry.created_objects` (kind `objects-restored`; a retry
 * finds them): named `objects-restored` once it finished, `part:<n>` for each part but the last
 * of a pass in several transactions. (A worker of a Ferry before parts reads any mark of the kind
 * as the whole pass done: mixed with newer workers in the middle of such a pass, it would skip
 * the parts left.)
 */
const RESTORED = 'objects-restored';
const partMark = (index: number) => `part:${index}`;

export interface RestoreObjectsInput {
  migrationId: string;
  source: string;
  target: string;
  tables: Pick<TablePlan, 'source'>[];
  /** A stored plan's migration (MigrationPlan.stored): its tables are read on the target, `tables` is empty. */
  storedFor?: string;
  objects: ObjectsPlan;
}

/**
 * The second pass, once the tables are loaded, in one target transaction: what needs the tables
 * (views, materialized views — then refreshed, in the dump's order —, triggers, rules, policies,
 * comments, grants), then each moved table's owner. Ferry's later writes (validation's repair,
 * the online sync) run as a replica: the triggers and rules are there but do not fire on them.
 */
export function createRestoreObjects({ connections, logger }: ActivityDeps) {
  return async function restoreObjects(input: RestoreObjectsInput): Promise<{ created: number; refreshed: string[] }> {
    return connections.withClient(input.source, (source) =>
      connections.withClient(input.target, async (target) => {
        const tables = sourceTables(await tablesOrStored(target, input));
        if (await passDone(target, input.migrationId, RESTORED)) return { created: 0, refreshed: [] }; // an earlier attempt committed
        return withDump(connections.url(input.source), input.objects, DEFAULT_TIMEOUTS.lockTimeoutMs, async (dump) => {
          const passes = await objectPasses(source, tables, await tableOfContents(dump));
          const refreshed = await materializedViews(source, passes.after);
          const extra = [...refreshed.map((name) => `REFRESH MATERIALIZED VIEW ${name}`), ...(await tablePropertyStatements(source, tables))];
          let created = 0;
          const parts = passParts(passes.after, extra);
          for (const [index, part] of parts.entries()) {
            const marker = index === parts.length - 1 ? RESTORED : partMark(index);
            created += await inTransaction(target, () => restorePart(target, input.migrationId, marker, async () => restorePass(target, entryStatements(dump, part.entries), part.extra)));
          }
          logger.info({ migrationId: input.migrationId, created, refreshed, transactions: parts.length }, 'objects restored after the load');
          return { created, refreshed };
        });
      }),
    );
  };
}

/** Statements (dump entries, refreshes, table properties) a target transaction of the second pass runs at most: a view locks itself and its tables, so a few hundred locks. */
export const OBJECTS_PART = 200;

/**
 * The second pass in one target transaction, or — past OBJECTS_PART statements — in several,
 * in order: the dump's entries a part at a time, then the refreshes and table properties. Every
 * object and every moved table's owner takes a lock until its transaction ends, and thousands in
 * one outgrow the server's lock table ("out of shared memory").
 */
function passParts(entries: TocEntry[], extra: string[]): { entries: TocEntry[]; extra: string[] }[] {
  if (entries.length + extra.length <= OBJECTS_PART) return [{ entries, extra }];
  const parts: { entries: TocEntry[]; extra: string[] }[] = [];
  for (let i = 0; i < entries.length; i += OBJECTS_PART) parts.push({ entries: entries.slice(i, i + OBJECTS_PART), extra: [] });
  for (let i = 0; i < extra.length; i += OBJECTS_PART) parts.push({ entries: [], extra: extra.slice(i, i + OBJECTS_PART) });
  return parts;
}

async function passDone(target: ClientBase, migrationId: string, marker: string): Promise<boolean> {
  const { rowCount } = await target.query(`SELECT 1 FROM _ferry.created_objects WHERE migration_id = $1 AND kind = $2 AND name = $3`, [migrationId, RESTORED, marker]);
  return Boolean(rowCount);
}

/**
 * One part of the second pass, in the caller's transaction, unless an earlier attempt committed
 * it (its marker is there): what it created recorded for rollback, and its marker. Returns how
 * many objects it created.
 */
async function restorePart(target: ClientBase, migrationId: string, marker: string, restore: () => Promise<ObjectAddress[]>): Promise<number> {
  // This migration's row, not the bookkeeping's lock: a long refresh holds up no other
  // migration's steps on this target, only a second attempt of this pass.
  const own = await target.query('SELECT 1 FROM _ferry.migrations WHERE id = $1 FOR UPDATE', [migrationId]);
  // Rolled back already (a cancel that overtook this attempt): create nothing it would not drop.
  if (!own.rowCount) throw refusal(FAILURE.Refused, `migration ${migrationId} has no bookkeeping on the target any more (rolled back); nothing restored`);
  if (await passDone(target, migrationId, marker)) return 0;
  await target.query('SET LOCAL statement_timeout = 0'); // a refresh runs its view's query in full
  const created = await restore();
  await recordObjects(target, migrationId, created, marker);
  return created.length;
}

/** Records a part's objects after whatever the migration recorded before, and the part as done (its marker). */
async function recordObjects(db: ClientBase, migrationId: string, created: ObjectAddress[], marker: string): Promise<void> {
  const record = await createdObjectsRecorder(db, migrationId);
  for (const address of created) await record('object', JSON.stringify(address));
  await record(RESTORED, marker);
}
