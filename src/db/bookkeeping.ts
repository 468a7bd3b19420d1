/**
 * Ferry's bookkeeping on the target, schema `_ferry`: which migrations prepared the target,
 * which objects each one created (so rollback drops exactly those), and one checkpoint row per
 * chunk — the resume point and the fence that stops a zombie attempt from writing.
 */
import { ClientBase } from 'pg';
import { Key } from '../core/plan';
import { migrateSchema, VersionedSchema } from './schema-versions';

export const BOOKKEEPING_LOCK = 'ferry:bookkeeping';

/**
 * The bookkeeping's numbered versions. Steps are only ever appended: a released step never
 * changes, so any older bookkeeping is brought up to date by the steps after its version.
 */
export const BOOKKEEPING: VersionedSchema = {
  schema: '_ferry',
  steps: [
    {
      version: 1,
      name: 'migrations, created objects, checkpoints, dirty keys',
      sql: `
CREATE TABLE IF NOT EXISTS _ferry.migrations (
  id          text PRIMARY KEY,
  prepared_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS _ferry.created_objects (
  migration_id text NOT NULL,
  seq          int  NOT NULL,
  kind         text NOT NULL CHECK (kind IN ('schema', 'type', 'sequence', 'table', 'existing-table')),
  name         text NOT NULL,
  PRIMARY KEY (migration_id, seq)
);
CREATE TABLE IF NOT EXISTS _ferry.checkpoints (
  migration_id text   NOT NULL,
  table_index  int    NOT NULL,
  chunk_index  int    NOT NULL,
  last_key     text[],
  rows_copied  bigint NOT NULL DEFAULT 0,
  done         boolean NOT NULL DEFAULT false,
  owner_token  bigint NOT NULL DEFAULT 0,
  owner        text,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (migration_id, table_index, chunk_index)
);
-- Online mode: keys applied after a table's validation began, re-checked before cutover.
CREATE TABLE IF NOT EXISTS _ferry.dirty (
  migration_id text   NOT NULL,
  table_index  int    NOT NULL,
  pk           text[] NOT NULL,
  PRIMARY KEY (migration_id, table_index, pk)
)`,
    },
    {
      version: 2,
      // The chunk plan the checkpoints refer to: ferry retry resumes with exactly this plan.
      // Rows of migrations prepared before it have none (retry refuses them).
      name: 'migrations.plan',
      sql: 'ALTER TABLE _ferry.migrations ADD COLUMN plan jsonb',
    },
    {
      version: 3,
      // Set once the target holds everything (the drain and sequences done): from then on the
      // target's tables are the migration's result, which a cleanup must never drop.
      name: 'migrations.completed_at',
      sql: 'ALTER TABLE _ferry.migrations ADD COLUMN completed_at timestamptz',
    },
    {
      version: 4,
      // objects: all — the objects a dump's pass created, by address (`object`), and the mark of
      // a finished second pass (`objects-restored`).
      name: 'created_objects.kind objects',
      sql: `ALTER TABLE IF EXISTS _ferry.created_objects DROP CONSTRAINT IF EXISTS created_objects_kind_check,
              ADD CONSTRAINT created_objects_kind_check CHECK (kind IN ('schema', 'type', 'sequence', 'table', 'existing-table', 'object', 'objects-restored'))`,
    },
  ],
  // Bookkeeping of a Ferry from before the versions: its columns say how far it had come.
  baseline: async (db) => {
    const { rows } = await db.query(
      `SELECT to_regclass('_ferry.migrations') IS NOT NULL AS present,
              array(SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass('_ferry.migrations') AND attnum > 0 AND NOT attisdropped) AS columns`,
    );
    if (!rows[0].present) return 0;
    const columns: string[] = rows[0].columns;
    return columns.includes('completed_at') ? 3 : columns.includes('plan') ? 2 : 1;
  },
};

/** The tables of the bookkeeping schema, dropped with it once no migration uses them. */
export const BOOKKEEPING_TABLES = ['checkpoints', 'dirty', 'created_objects', 'migrations'] as const;

/** Creates or upgrades the bookkeeping; the caller holds lockBookkeeping in a transaction. */
export async function ensureBookkeeping(db: ClientBase): Promise<void> {
  await migrateSchema(db, BOOKKEEPING);
}

/** The checkpoint row that fences a table's incremental sync (chunks count from 0). */
export const SYNC_CHUNK = -1;

/** Serialises creation and removal of the `_ferry` schema between concurrent migrations. */
export async function lockBookkeeping(db: ClientBase): Promise<void> {
  await db.query('SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))', [BOOKKEEPING_LOCK]);
}

export async function bookkeepingExists(db: ClientBase): Promise<boolean> {
  const { rows } = await db.query(`SELECT to_regclass('_ferry.migrations') IS NOT NULL AS present`);
  return rows[0].present;
}

export interface ChunkRef {
  migrationId: string;
  tableIndex: number;
  chunkIndex: number;
}

const REF = 'migration_id = $1 AND table_index = $2 AND chunk_index = $3';

function refParams(ref: ChunkRef): unknown[] {
  return [ref.migrationId, ref.tableIndex, ref.chunkIndex];
}

export interface CheckpointRow {
  lastKey: Key | null;
  rowsCopied: number;
  done: boolean;
}

/**
 * Claims the chunk for the attempt holding `token`. Tokens only grow, so an older attempt that
 * is still running cannot claim it back. Returns the committed checkpoint, or null when a
 * newer attempt already owns the chunk.
 */
export async function claimChunk(db: ClientBase, ref: ChunkRef, token: number, owner: string): Promise<CheckpointRow | null> {
  const { rows } = await db.query(
    `UPDATE _ferry.checkpoints SET owner_token = $4, owner = $5, updated_at = now()
      WHERE ${REF} AND owner_token < $4
      RETURNING last_key, rows_copied::int8 AS rows_copied, done`,
    [...refParams(ref), token, owner],
  );
  if (rows.length === 0) return null;
  return { lastKey: rows[0].last_key, rowsCopied: Number(rows[0].rows_copied), done: rows[0].done };
}

/**
 * claimChunk of the syncs (SYNC_CHUNK) of many tables in one statement: the indexes of those
 * whose fence this took (any other is held by a newer token).
 */
export async function claimSyncs(db: ClientBase, migrationId: string, tableIndexes: number[], token: number, owner: string): Promise<number[]> {
  const { rows } = await db.query(
    `UPDATE _ferry.checkpoints SET owner_token = $4, owner = $5, updated_at = now()
      WHERE migration_id = $1 AND table_index = ANY ($2::int[]) AND chunk_index = $3 AND owner_token < $4
      RETURNING table_index`,
    [migrationId, tableIndexes, SYNC_CHUNK, token, owner],
  );
  return rows.map((r) => r.table_index as number);
}

/** The tables among `tableIndexes` with keys in the dirty set. */
export async function tablesWithDirtyKeys(db: ClientBase, migrationId: string, tableIndexes: number[]): Promise<number[]> {
  const { rows } = await db.query(
    `SELECT w.idx FROM unnest($2::int[]) AS w(idx)
      WHERE EXISTS (SELECT 1 FROM _ferry.dirty d WHERE d.migration_id = $1 AND d.table_index = w.idx)`,
    [migrationId, tableIndexes],
  );
  return rows.map((r) => r.idx as number);
}

/**
 * Inside a batch's transaction: lock the checkpoint row and check this attempt still owns it.
 * `share`: the attempt's parallel writers (a sync's lanes) hold the row together; a newer
 * attempt's claim waits for all of them just the same.
 */
export async function holdsFence(db: ClientBase, ref: ChunkRef, token: number, lock: 'update' | 'share' = 'update'): Promise<boolean> {
  const { rows } = await db.query(`SELECT owner_token::int8 AS token FROM _ferry.checkpoints WHERE ${REF} FOR ${lock === 'share' ? 'SHARE' : 'UPDATE'}`, refParams(ref));
  return rows.length === 1 && Number(rows[0].token) === token;
}

export async function advanceCheckpoint(db: ClientBase, ref: ChunkRef, lastKey: Key | null, rows: number, done: boolean): Promise<void> {
  await db.query(
    `UPDATE _ferry.checkpoints
        SET last_key = coalesce($4::text[], last_key), rows_copied = rows_copied + $5, done = $6, updated_at = now()
      WHERE ${REF}`,
    [...refParams(ref), lastKey, rows, done],
  );
}

/** A synchronous commit on the checkpoint row (the session default), flushing all WAL before it. */
export async function touchCheckpoint(db: ClientBase, ref: ChunkRef): Promise<void> {
  await db.query(`UPDATE _ferry.checkpoints SET updated_at = now() WHERE ${REF}`, refParams(ref));
}

/** Marks the migration's target as complete (see _ferry.migrations.completed_at). */
export async function markCompleted(db: ClientBase, migrationId: string): Promise<void> {
  await lockBookkeeping(db);
  await ensureBookkeeping(db);
  await db.query('UPDATE _ferry.migrations SET completed_at = coalesce(completed_at, now()) WHERE id = $1', [migrationId]);
}

/** What a `_ferry.created_objects` row records (the table's CHECK): objects, and the mark of a finished second pass of `objects: all`. */
export type CreatedKind = 'schema' | 'type' | 'sequence' | 'table' | 'existing-table' | 'object' | 'objects-restored';

/**
 * Appends a migration's rows to `_ferry.created_objects`, after any it has already (rollback
 * drops them newest first); `name` is stored as given. For the caller's transaction.
 */
export async function createdObjectsRecorder(db: ClientBase, migrationId: string): Promise<(kind: CreatedKind, name: string) => Promise<void>> {
  const { rows } = await db.query<{ n: number }>('SELECT coalesce(max(seq), 0)::int AS n FROM _ferry.created_objects WHERE migration_id = $1', [migrationId]);
  let seq = rows[0].n;
  return async (kind, name) => {
    seq += 1;
    await db.query('INSERT INTO _ferry.created_objects (migration_id, seq, kind, name) VALUES ($1, $2, $3, $4)', [migrationId, seq, kind, name]);
  };
}
