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
import { restorePass, sourceTables } from '../src/db/object-passes';
import { entriesSql, tableOfContents, withDump } from '../src/db/schema-dump';
import { materializedViews, ObjectAddress, objectPasses, tablePropertyStatements } from '../src/db/schema-objects';
import { DEFAULT_TIMEOUTS } from '../src/db/session';
import { ActivityDeps } from './deps';

/** The marker a finished second pass leaves in `_ferry.created_objects` (a retry finds it). */
const RESTORED = 'objects-restored' as const;

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
      connections.withClient(input.target, (target) =>
        inTransaction(target, async () => {
          const tables = sourceTables(await tablesOrStored(target, input));
          // This migration's row, not the bookkeeping's lock: a long refresh holds up no other
          // migration's steps on this target, only a second attempt of this pass.
          const own = await target.query('SELECT 1 FROM _ferry.migrations WHERE id = $1 FOR UPDATE', [input.migrationId]);
          // Rolled back already (a cancel that overtook this attempt): create nothing it would not drop.
          if (!own.rowCount) throw refusal(FAILURE.Refused, `migration ${input.migrationId} has no bookkeeping on the target any more (rolled back); nothing restored`);
          const done = await target.query(`SELECT 1 FROM _ferry.created_objects WHERE migration_id = $1 AND kind = $2`, [input.migrationId, RESTORED]);
          if (done.rowCount) return { created: 0, refreshed: [] }; // an earlier attempt committed
          return withDump(connections.url(input.source), input.objects, DEFAULT_TIMEOUTS.lockTimeoutMs, async (dump) => {
            const passes = await objectPasses(source, tables, await tableOfContents(dump));
            const refreshed = await materializedViews(source, passes.after);
            const refresh = refreshed.map((name) => `REFRESH MATERIALIZED VIEW ${name}`);
            await target.query('SET LOCAL statement_timeout = 0'); // a refresh runs its view's query in full
            const created = await restorePass(target, await entriesSql(dump, passes.after), [...refresh, ...(await tablePropertyStatements(source, tables))]);
            await recordObjects(target, input.migrationId, created);
            logger.info({ migrationId: input.migrationId, created: created.length, refreshed }, 'objects restored after the load');
            return { created: created.length, refreshed };
          });
        }),
      ),
    );
  };
}

/** Records a pass's objects after whatever the migration recorded before, and the pass as done. */
async function recordObjects(db: ClientBase, migrationId: string, created: ObjectAddress[]): Promise<void> {
  const record = await createdObjectsRecorder(db, migrationId);
  for (const address of created) await record('object', JSON.stringify(address));
  await record(RESTORED, RESTORED);
}
