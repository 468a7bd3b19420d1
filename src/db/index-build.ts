/**
 * Building a migrated table's keys and indexes on the target, copied from the source's
 * definitions: one index or constraint at a time (the index activities), or a small table's
 * whole index phase at once, inside its copy (finishSmallTable).
 */
import { Client, ClientBase, PoolClient } from 'pg';
import { ApplicationFailure } from '@temporalio/common';
import { hasUniqueIndexOver, readSourceTables, TableInfo, TableKey, withCatalogKeyTypes } from './catalog';
import { quotedLog } from './capture-sql';
import { inTransaction } from './connections';
import { deleteKeys } from './copy-stream';
import { addConstraintSql, addPrimaryKeySql, createIndexSql } from './ddl';
import { refusal, sqlState } from './errors';
import { keyFromRow } from './ranges';
import { duplicateKeysSql, readUniqueKeys } from './unique-keys';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import { isKeyless, targetIndexName } from '../core/plan';
import type { CopyTable, Key, TablePlan } from '../core/plan';
import { Logger } from '../logger';
import { enqueue } from './change-log';
import { FAILURE } from '../core/failure-types';

export type IndexKind = 'index' | 'constraint';

export interface IndexRef {
  name: string;
  kind: IndexKind;
  /** A unique index or constraint (its build can meet duplicates left by a live sync). */
  unique: boolean;
  /** An exclusion constraint. */
  exclusion: boolean;
  /** Its name on the target where the source's is taken there (TablePlan.targetNames); absent: `name`. */
  targetName?: string;
}

export interface ListIndexesInput {
  source: string;
  table: Pick<TablePlan, 'source' | 'target' | 'targetExisted' | 'targetNames' | 'keyColumns'>;
}

export interface BuildIndexInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  index: IndexRef;
  /** Online mode: evict rows that share a unique value, through the change log. */
  evictDuplicates: boolean;
}

export interface BuildIndexResult {
  built: boolean;
  /** Rows evicted from the target and queued for replay. */
  evicted: number;
}

const MAX_EVICTION_ROUNDS = 5;

async function sourceTable(db: ClientBase, name: QualifiedName): Promise<TableInfo> {
  return (await readSourceTables(db, [name]))[0];
}

function nameOnTarget(index: IndexRef): string {
  return index.targetName ?? index.name;
}

async function indexExists(db: ClientBase, table: QualifiedName, index: IndexRef): Promise<boolean> {
  const sql =
    index.kind === 'constraint'
      ? 'SELECT 1 FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2'
      : 'SELECT 1 FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1) AND c.relname = $2 AND i.indisvalid';
  return ((await db.query(sql, [quoteQualified(table), nameOnTarget(index)])).rowCount ?? 0) > 0;
}

/** A dedicated or a pooled session. */
type Session = Client | PoolClient;

/** What building an index needs once its sessions are open: not the connections' names. */
type IndexBuild = Omit<BuildIndexInput, 'source' | 'target'>;

/** ANALYZE without a statement timeout. */
export async function analyzeOn(db: ClientBase, table: QualifiedName): Promise<void> {
  await untimed(db, () => db.query(`ANALYZE ${quoteQualified(table)}`));
}

/** The source's secondary indexes and unique or exclusion constraints of the table, to build on the target. */
export async function listIndexesOn(source: ClientBase, table: ListIndexesInput['table'], read?: TableInfo): Promise<IndexRef[]> {
  // A target the user prepared keeps the indexes it has: Ferry adds none to it.
  if (table.targetExisted) return [];
  const info = read ?? (await sourceTable(source, table.source));
  const renamed = (name: string) => (targetIndexName(table, name) !== name ? { targetName: targetIndexName(table, name) } : {});
  // A key that is a unique index was built with the primary keys (addPrimaryKeyOn), before any sync.
  const key = plannedKey(info, table);
  const isKey = (name: string) => key !== undefined && key !== null && key.kind !== 'primary key' && key.name === name;
  return [
    ...info.indexes.filter((i) => !isKey(i.name)).map((i) => ({ name: i.name, kind: 'index' as const, unique: /^CREATE UNIQUE /.test(i.definition), exclusion: false, ...renamed(i.name) })),
    ...info.uniques.filter((u) => !isKey(u.name)).map((u) => ({
      name: u.name,
      kind: 'constraint' as const,
      unique: /^UNIQUE/.test(u.definition),
      exclusion: /^EXCLUDE/.test(u.definition),
      ...renamed(u.name),
    })),
  ];
}

/** Runs `fn` on `db` without a statement timeout: a build of a large table must not meet it. */
async function untimed<T>(db: ClientBase, fn: () => Promise<T>): Promise<T> {
  await db.query('SET statement_timeout = 0');
  try {
    return await fn();
  } finally {
    await db.query('RESET statement_timeout').catch(() => undefined);
  }
}

export async function buildIndexOn(source: Session, target: Session, input: IndexBuild, logger: Logger, read?: TableInfo): Promise<BuildIndexResult> {
  const label = `${input.index.name} on ${displayQualified(input.table.target)}`;
  if (await indexExists(target, input.table.target, input.index)) return { built: false, evicted: 0 };
  const info = read ?? (await sourceTable(source, input.table.source));
  const sql = definition(info, input.table.target, input.index);
  let evicted = 0;
  return untimed(target, async () => {
    for (let round = 0; ; round += 1) {
      try {
        await target.query(sql);
        logger.info({ migrationId: input.migrationId, index: label, evicted }, 'index built');
        return { built: true, evicted };
      } catch (err) {
        if (!input.evictDuplicates || !input.index.unique || sqlState(err) !== '23505' || round >= MAX_EVICTION_ROUNDS) throw err;
        evicted += await evictDuplicates(source, target, input);
      }
    }
  });
}

/**
 * The key of a table loaded without it (prepareTarget's primaryKeyAfterLoad): its primary key,
 * or the unique index over NOT NULL columns the source is keyed by (a partitioned table's, at
 * its creation). Rows copied twice would make it fail (23505) — which a batch committing with
 * its checkpoint, under the chunk's fence, rules out; a failure here is a loud proof that
 * something broke that. A target that has a unique index over the key's columns already (a
 * table the user prepared, or an earlier attempt) is left as it is.
 *
 * A table read by blocks (copyBy) is the exception: a row that a write moved from a block the
 * copy had read to one it had not yet read arrives twice. Its twins are dropped, every copy of
 * the key, and the build tried again; validation (never `none` for such a table) finds the keys
 * missing and copies them again by key range.
 */
export async function addPrimaryKeyOn(
  source: ClientBase,
  target: ClientBase,
  table: Pick<TablePlan, 'source' | 'target' | 'targetNames' | 'copyBy' | 'keyColumns'>,
  read?: TableInfo,
): Promise<{ built: boolean; twinsDropped?: number }> {
  const info = read ?? (await sourceTable(source, table.source));
  const key = keyOfPlan(info, table);
  if (await hasUniqueIndexOver(target, table.target, key.columns)) return { built: false };
  const sql = keySql(info, key, table);
  let twinsDropped = 0;
  for (let round = 0; ; round += 1) {
    try {
      await untimed(target, () =>
        inTransaction(target, async () => {
          for (const statement of sql) await target.query(statement);
        }),
      );
      return { built: true, ...(twinsDropped ? { twinsDropped } : {}) };
    } catch (err) {
      if (sqlState(err) !== '23505' || table.copyBy !== 'blocks' || round >= MAX_EVICTION_ROUNDS) throw err;
      twinsDropped += await dropTwins(target, table.target, key.columns);
    }
  }
}

/** Deletes every row of `table` whose key another row has too; returns how many. */
async function dropTwins(target: ClientBase, table: QualifiedName, columns: string[]): Promise<number> {
  const key = columns.map(quoteIdent).join(', ');
  const relation = quoteQualified(table);
  const result = await untimed(target, () => target.query(`DELETE FROM ${relation} WHERE (${key}) IN (SELECT ${key} FROM ${relation} GROUP BY ${key} HAVING count(*) > 1)`));
  return result.rowCount ?? 0;
}

/**
 * Which of the source's keys (TableInfo.keys) the plan moves the table by: the one over its
 * keyColumns — not whichever would be chosen now (a narrower unique index created since would
 * be); null for a table without a key, undefined when the source no longer has it.
 */
export function plannedKey(info: TableInfo, table: Pick<TablePlan, 'keyColumns'>): TableKey | null | undefined {
  if (isKeyless(table)) return null;
  const wanted = table.keyColumns.map((k) => k.name).join('\u0000');
  return info.keys.find((k) => k.columns.join('\u0000') === wanted);
}

/** plannedKey, where the table has one and the source must still have it. */
export function keyOfPlan(info: TableInfo, table: Pick<TablePlan, 'keyColumns'>): TableKey {
  const key = plannedKey(info, table);
  if (key) return key;
  throw ApplicationFailure.nonRetryable(
    `${displayQualified(info.name)} has no primary key or unique index over NOT NULL columns (${table.keyColumns.map((k) => k.name).join(', ')}) on the source any more; ` +
      'restore it, or cancel and start again',
    FAILURE.SchemaChanged,
  );
}

/** The statements that give the target the source's key, in one transaction. */
export function keySql(info: TableInfo, key: TableKey, table: Pick<TablePlan, 'target' | 'targetNames'>): string[] {
  if (key.kind === 'primary key') return addPrimaryKeySql(info, table.target, info.primaryKey!.indexDefinition, targetIndexName(table, key.name));
  const targetName = targetIndexName(table, key.name);
  const index: IndexRef = {
    name: key.name,
    kind: key.kind === 'unique constraint' ? 'constraint' : 'index',
    unique: true,
    exclusion: false,
    ...(targetName !== key.name ? { targetName } : {}),
  };
  return [definition(info, table.target, index)];
}

/** What finishSmallTable needs of the table's plan. */
export type FinishTable = Pick<TablePlan, 'source' | 'target' | 'targetExisted' | 'targetNames' | 'copyBy' | 'keyColumns'>;

/**
 * A small table's whole index phase on two sessions, for its copy to run once loaded (full
 * mode): the primary key where it was loaded without it, then every secondary index and unique
 * or exclusion constraint one after another, then ANALYZE — one activity where a large table
 * takes one per index, in parallel, since for a few thousand rows each round trip through
 * Temporal costs more than the build. Each step is skipped when it is done already, so a retry
 * finishes what an earlier attempt began.
 */
export async function finishSmallTable(
  source: Session,
  target: Session,
  input: { migrationId: string; table: FinishTable; copyTable: CopyTable; primaryKey: boolean },
  logger: Logger,
  heartbeat: () => void,
): Promise<{ built: number; evicted: number }> {
  // The source's catalog read once for the key and every index (each step alone reads its own).
  const info = await sourceTable(source, input.table.source);
  if (input.primaryKey && !isKeyless(input.copyTable)) await addPrimaryKeyOn(source, target, input.table, info);
  heartbeat();
  let built = 0;
  for (const index of await listIndexesOn(source, input.table, info)) {
    const result = await buildIndexOn(source, target, { migrationId: input.migrationId, table: input.copyTable, index, evictDuplicates: false }, logger, info);
    if (result.built) built += 1;
    heartbeat();
  }
  await analyzeOn(target, input.table.target);
  return { built, evicted: 0 };
}

function definition(info: TableInfo, target: QualifiedName, index: IndexRef): string {
  const found = (index.kind === 'constraint' ? info.uniques : info.indexes).find((i) => i.name === index.name);
  if (!found) throw refusal(FAILURE.MissingIndex, `${index.name} disappeared from ${displayQualified(info.name)} on the source`);
  const name = nameOnTarget(index);
  return index.kind === 'constraint' ? addConstraintSql(found, target, name) : createIndexSql(found, info, target, name);
}

/**
 * Rows of the target that share a value of the unique key being built: their keys go into the
 * source's change log first (committed), then the rows leave the target, so a crash between
 * the two at worst replays a row twice. Nothing else writes the table meanwhile: its sync is
 * paused by its workflow, and the lock keeps a straggling attempt out.
 */
async function evictDuplicates(source: Session, target: Session, input: IndexBuild): Promise<number> {
  const key = (await readUniqueKeys(source, input.table.source)).find((k) => k.name === input.index.name);
  if (!key) throw refusal(FAILURE.MissingIndex, `${input.index.name} disappeared from ${displayQualified(input.table.source)} on the source`);
  const shape = await withCatalogKeyTypes(source, input.table);
  return inTransaction(target, async () => {
    await target.query(`LOCK TABLE ${quoteQualified(input.table.target)} IN SHARE ROW EXCLUSIVE MODE`);
    const keys: Key[] = (await target.query(duplicateKeysSql(input.table.target, key, shape))).rows.map((r) => keyFromRow(r, shape));
    if (keys.length === 0) return 0;
    const log = quotedLog(input.migrationId, input.table.index);
    await enqueue(source, log, keys);
    await deleteKeys(target, shape, keys);
    return keys.length;
  });
}
