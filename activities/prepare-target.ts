/**
 * prepareTarget: in one target transaction, so a retry finds all or nothing — bookkeeping,
 * schemas, user types, sequences and tables (columns, NOT NULL, defaults, CHECKs, primary key;
 * a partitioned table with every partition under it) and one checkpoint row per chunk. Every
 * object it creates is recorded for rollback. With `objects: all`, the first pass of the source's
 * other objects (activities/objects.ts) comes first, in the same transaction. A stored plan's
 * thousands of tables (MigrationPlan.stored) go in batches, a transaction each.
 */
import { ClientBase } from 'pg';
import { readTables, readUserTypes, TableInfo, typeExists } from '../src/db/catalog';
import { inTransaction } from '../src/db/connections';
import { bookkeepingExists, createdObjectsRecorder, CreatedKind, ensureBookkeeping, lockBookkeeping, SYNC_CHUNK } from '../src/db/bookkeeping';
import { createSequenceSql, createTableSql, createTypeSql, SequenceNames, targetSequenceName } from '../src/db/ddl';
import { createPartitionSql, readPartitions, targetPartitionName } from '../src/db/partitions';
import { refusal } from '../src/db/errors';
import { keyOfPlan, keySql } from '../src/db/index-build';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified, withSuffix } from '../src/core/identifiers';
import { isKeyless, MigrationPlan, TablePlan, targetIndexName } from '../src/core/plan';
import { readStoredPlan, storedTables, tablePages } from '../src/db/stored-plan';
import { ActivityDeps } from './deps';
import { restoreBefore } from '../src/db/object-passes';
import { FAILURE } from '../src/core/failure-types';

export interface PrepareTargetInput {
  migrationId: string;
  source: string;
  target: string;
  plan: MigrationPlan;
  truncate: boolean;
  /**
   * Create the tables without their primary key, built after the load (addPrimaryKey): rows go
   * into a table with no index to maintain. Not for partitioned tables. Absent in executions of
   * an older Ferry.
   */
  primaryKeyAfterLoad?: boolean;
}

export function createPrepareTarget({ connections, logger }: ActivityDeps) {
  return async function prepareTarget(input: PrepareTargetInput): Promise<{ created: number }> {
    if (input.plan.stored) return await prepareStored({ connections, logger }, input);
    // A session of the worker's pool (one that fails mid-transaction is ended, not lent again):
    // the preflight that ran just before left one open, so the transaction starts without a new
    // session's start-up and cold catalog cache (63-75 ms → 30-44 ms for one table here).
    return connections.withClient(input.target, (target) =>
      inTransaction(target, async () => {
        await lockBookkeeping(target);
        await ensureBookkeeping(target);
        const done = await target.query('SELECT 1 FROM _ferry.migrations WHERE id = $1', [input.migrationId]);
        if (done.rowCount) return { created: 0 }; // an earlier attempt committed; its result was lost
        await target.query('INSERT INTO _ferry.migrations (id, plan) VALUES ($1, $2)', [input.migrationId, JSON.stringify(input.plan)]);
        const record = await recorder(target, input.migrationId);
        await connections.withClient(input.source, async (source) => {
          // objects: all — what the tables may need, from the source's pg_dump, before them.
          if (input.plan.objects) await restoreObjectsBefore(source, target, connections.url(input.source), input.plan, record);
          await prepareTables(source, target, input, input.plan.tables, { record, logger, schemas: new Set() });
        });
        return { created: await createdCount(target, input.migrationId) };
      }),
    );
  };
}

/** Tables of a stored plan a target transaction prepares: thousands in one would outgrow the server's lock table. */
const PREPARE_BATCH = 200;

/**
 * A stored plan (MigrationPlan.stored; preflight made the bookkeeping and its row): its tables,
 * read from the target, prepared PREPARE_BATCH to a transaction, each committed with its tables'
 * checkpoint rows — a retry skips the batches it finds done. `objects: all`'s first pass goes
 * with the first batch.
 */
async function prepareStored({ connections, logger }: Pick<ActivityDeps, 'connections' | 'logger'>, input: PrepareTargetInput): Promise<{ created: number }> {
  return connections.withClient(input.target, (target) =>
    connections.withClient(input.source, async (source) => {
      const schemas = new Set<string>();
      let first = true;
      // A batch's tables read as it comes: 10,000 plans are not held at once.
      for await (const batch of tablePages(target, { tables: [], storedFor: input.migrationId }, PREPARE_BATCH)) {
        await inTransaction(target, async () => {
          await lockBookkeeping(target);
          const last = batch[batch.length - 1].index;
          const done = await target.query('SELECT 1 FROM _ferry.checkpoints WHERE migration_id = $1 AND table_index = $2 AND chunk_index = $3', [input.migrationId, last, SYNC_CHUNK]);
          if (done.rowCount) return;
          const record = await recorder(target, input.migrationId);
          if (first && input.plan.objects) {
            const plan = { ...input.plan, tables: await storedTables(target, input.migrationId) };
            await restoreObjectsBefore(source, target, connections.url(input.source), plan, record);
          }
          await prepareTables(source, target, input, batch, { record, logger, schemas });
        });
        first = false;
      }
      return { created: await createdCount(target, input.migrationId) };
    }),
  );
}

/** objects: all — what the tables may need, from the source's pg_dump, before them; each created object recorded. */
async function restoreObjectsBefore(source: ClientBase, target: ClientBase, sourceUrl: string, plan: MigrationPlan, record: Recorder): Promise<void> {
  for (const address of await restoreBefore(source, target, sourceUrl, plan)) await record('object', JSON.stringify(address));
}

/**
 * The tables: those Ferry creates, read from the source in a few statements (readTables); those
 * the target had, emptied when the spec says truncate; each table's checkpoint rows.
 */
async function prepareTables(
  source: ClientBase,
  target: ClientBase,
  input: PrepareTargetInput,
  tables: TablePlan[],
  { record, logger, schemas }: { record: Recorder; logger: ActivityDeps['logger']; schemas: Set<string> },
): Promise<void> {
  const created = tables.filter((t) => !t.targetExisted);
  const infos = new Map((await readTables(source, created.map((t) => t.source))).map((info, i) => [created[i].index, info]));
  for (const table of tables) {
    if (table.targetExisted) {
      if (input.truncate) await target.query(`TRUNCATE ${quoteQualified(table.target)}`);
      await record('existing-table', table.target);
    } else {
      await createTargetTable(source, target, table, infos.get(table.index) ?? null, schemas, input.primaryKeyAfterLoad, record);
    }
    for (const chunk of [...table.chunks.map((c) => c.index), SYNC_CHUNK]) {
      await target.query(`INSERT INTO _ferry.checkpoints (migration_id, table_index, chunk_index) VALUES ($1, $2, $3)`, [input.migrationId, table.index, chunk]);
    }
    logger.info({ migrationId: input.migrationId, table: displayQualified(table.source) }, 'target table prepared');
  }
}

async function createdCount(target: ClientBase, migrationId: string): Promise<number> {
  return (await target.query('SELECT count(*)::int AS n FROM _ferry.created_objects WHERE migration_id = $1', [migrationId])).rows[0].n;
}

/**
 * A table Ferry creates, as the source has it now (`info`): its schema (unless `schemas` holds it
 * already) and user types, its serial sequences, the table, its partitions.
 */
async function createTargetTable(
  source: ClientBase,
  target: ClientBase,
  table: TablePlan,
  info: TableInfo | null,
  schemas: Set<string>,
  primaryKeyAfterLoad: boolean | undefined,
  record: Recorder,
): Promise<void> {
  if (!info) throw refusal(FAILURE.MissingTable, `table ${displayQualified(table.source)} disappeared from the source after preflight`);
  if (!schemas.has(table.target.schema)) {
    await ensureSchema(target, table.target.schema, record);
    schemas.add(table.target.schema);
  }
  for (const type of await readUserTypes(source, info.columns.map((c) => c.typeOid))) {
    if (await typeExists(target, type.name)) continue;
    await target.query(createTypeSql(type));
    await record('type', type.name);
  }
  // Every serial sequence is Ferry's own, under a free name: a sequence already
  // there belongs to someone else (setval, OWNED BY or rollback's CASCADE would hit it).
  const serials = info.sequences.filter((s) => !s.identity);
  const sequences: SequenceNames = new Map();
  for (const seq of serials) {
    const name = await freeSequenceName(target, targetSequenceName(seq, table.target));
    await target.query(createSequenceSql(seq, name));
    await record('sequence', name);
    sequences.set(seq.regclassText, name);
  }
  const primaryKey = !(primaryKeyAfterLoad && !info.partitionKey);
  const primaryKeyName = info.primaryKey ? targetIndexName(table, info.primaryKey.name) : undefined;
  await target.query(createTableSql(info, table.target, sequences, { primaryKey, primaryKeyName }));
  await record('table', table.target);
  // Recorded after their parent, so rollback drops them first.
  for (const partition of info.partitionKey ? await readPartitions(source, table.source) : []) {
    await target.query(createPartitionSql(partition, table.target));
    await record('table', targetPartitionName(partition.name, table.target));
  }
  for (const seq of serials) {
    await target.query(`ALTER SEQUENCE ${quoteQualified(sequences.get(seq.regclassText)!)} OWNED BY ${quoteQualified(table.target)}.${quoteIdent(seq.column)}`);
  }
  // A key made at creation that is a unique index, not a primary key: built on the empty table.
  if (primaryKey && !info.primaryKey && !isKeyless(table)) for (const sql of keySql(info, keyOfPlan(info, table), table)) await target.query(sql);
}

/** The plan a migration's checkpoints refer to, when its bookkeeping is still on the target (a large one without its tables: MigrationPlan.stored). */
export function createStoredPlan({ connections }: ActivityDeps) {
  return async function storedPlan({ migrationId, target }: { migrationId: string; target: string }): Promise<MigrationPlan | null> {
    return await connections.withClient(target, async (db) => {
      if (!(await bookkeepingExists(db))) return null;
      const plan = await readStoredPlan(db, migrationId);
      if (plan === 'without plan') {
        // Checkpoints without the plan they index: a fresh plan could cut other chunks and skip rows.
        throw refusal(
          FAILURE.PlanNotStored,
          `migration ${migrationId} was prepared by a Ferry that did not store its chunk plan, so its checkpoints cannot be resumed; ` +
            'roll its target back (drop the tables it created and its _ferry rows) and start it again',
        );
      }
      return plan;
    });
  };
}

/** A page of a stored plan's tables (MigrationPlan.stored), [from, to) in plan order. */
export function createPlanTables({ connections }: ActivityDeps) {
  return async function planTables({ migrationId, target, from, to }: { migrationId: string; target: string; from: number; to: number }): Promise<TablePlan[]> {
    return await connections.withClient(target, (db) => storedTables(db, migrationId, from, to));
  };
}

/** `object`: an object a dump's pass created, by its address as JSON (src/db/object-passes.ts). */
type Recorder = (kind: Exclude<CreatedKind, 'objects-restored'>, name: QualifiedName | string) => Promise<void>;

/** Records names as Ferry quotes them (rollback looks them up in that form); an address as it is. */
async function recorder(db: ClientBase, migrationId: string): Promise<Recorder> {
  const record = await createdObjectsRecorder(db, migrationId);
  return (kind, name) => record(kind, kind === 'object' ? (name as string) : typeof name === 'string' ? quoteIdent(name) : quoteQualified(name));
}

/** `wanted` when no relation has that name, else the first free `<name>_ferry_<n>`. */
async function freeSequenceName(db: ClientBase, wanted: QualifiedName): Promise<QualifiedName> {
  for (let n = 0; ; n += 1) {
    const name = n === 0 ? wanted : { schema: wanted.schema, name: withSuffix(wanted.name, `_ferry_${n}`) };
    const { rows } = await db.query('SELECT to_regclass($1) IS NULL AS free', [quoteQualified(name)]);
    if (rows[0].free) return name;
  }
}

async function ensureSchema(db: ClientBase, schema: string, record: Recorder): Promise<void> {
  const { rows } = await db.query('SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1', [schema]);
  if (rows.length > 0) return;
  await db.query(`CREATE SCHEMA ${quoteIdent(schema)}`);
  await record('schema', schema);
}
