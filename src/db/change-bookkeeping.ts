/**
 * A change plan's bookkeeping in the database it changes, schema `_ferry_change` (its own, so a
 * migration's `_ferry` coming and going never touches it): which changes run, which steps have
 * committed (a retried step whose completion was lost finds its row and does nothing), and one
 * checkpoint row per backfill pass — resume point and fence, as a chunk's checkpoint is for a
 * copy (docs/architecture.md §5). Removed with the last change that used it.
 */
import { ClientBase } from 'pg';
import { Key } from '../core/plan';
import { dropSchemaIfEmpty, migrateSchema, VersionedSchema } from './schema-versions';

/** The schema's numbered versions (see schema-versions.ts): steps are only ever appended. */
export const CHANGE_BOOKKEEPING: VersionedSchema = {
  schema: '_ferry_change',
  steps: [
    {
      version: 1,
      name: 'changes, steps, backfills',
      sql: `
CREATE TABLE IF NOT EXISTS _ferry_change.changes (
  change_id  text PRIMARY KEY,
  run_id     text NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS _ferry_change.steps (
  change_id text NOT NULL,
  run_id    text NOT NULL,
  step      int  NOT NULL,
  direction text NOT NULL CHECK (direction IN ('up', 'down')),
  done_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (change_id, run_id, step, direction)
);
CREATE TABLE IF NOT EXISTS _ferry_change.backfills (
  change_id    text   NOT NULL,
  run_id       text   NOT NULL,
  step         int    NOT NULL,
  pass         int    NOT NULL,
  last_key     text[],
  rows_updated bigint NOT NULL DEFAULT 0,
  rows_scanned bigint NOT NULL DEFAULT 0,
  done         boolean NOT NULL DEFAULT false,
  owner_token  bigint NOT NULL DEFAULT 0,
  owner        text,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (change_id, run_id, step, pass)
)`,
    },
  ],
};

const LOCK = 'ferry:change-bookkeeping';

export interface StepRef {
  changeId: string;
  runId: string;
  step: number;
}

export interface PassRef extends StepRef {
  pass: number;
}

/** Serialises the schema's creation and removal between changes on one database. */
export async function lockChangeBookkeeping(db: ClientBase): Promise<void> {
  await db.query('SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))', [LOCK]);
}

/** Inside a transaction: the schema exists and this change is registered (so no other change drops it). */
export async function registerChange(db: ClientBase, changeId: string, runId: string): Promise<void> {
  await lockChangeBookkeeping(db);
  await migrateSchema(db, CHANGE_BOOKKEEPING);
  await db.query(
    `INSERT INTO _ferry_change.changes (change_id, run_id) VALUES ($1, $2)
     ON CONFLICT (change_id) DO UPDATE SET run_id = EXCLUDED.run_id`,
    [changeId, runId],
  );
}

/** Inside a transaction: forget the change; the schema goes with the last change. */
export async function forgetChange(db: ClientBase, changeId: string): Promise<void> {
  await lockChangeBookkeeping(db);
  if (!(await db.query(`SELECT to_regclass('_ferry_change.changes') IS NOT NULL AS present`)).rows[0].present) return;
  for (const table of ['backfills', 'steps', 'changes']) await db.query(`DELETE FROM _ferry_change.${table} WHERE change_id = $1`, [changeId]);
  const others = await db.query('SELECT 1 FROM _ferry_change.changes LIMIT 1');
  if (others.rowCount === 0) await dropSchemaIfEmpty(db, CHANGE_BOOKKEEPING.schema, ['backfills', 'steps', 'changes']);
}

export async function stepDone(db: ClientBase, ref: StepRef, direction: 'up' | 'down'): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM _ferry_change.steps WHERE change_id = $1 AND run_id = $2 AND step = $3 AND direction = $4', [
    ref.changeId,
    ref.runId,
    ref.step,
    direction,
  ]);
  return (rowCount ?? 0) > 0;
}

/** In the step's own transaction: it commits with the step, or not at all. */
export async function markStepDone(db: ClientBase, ref: StepRef, direction: 'up' | 'down'): Promise<void> {
  await db.query('INSERT INTO _ferry_change.steps (change_id, run_id, step, direction) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING', [
    ref.changeId,
    ref.runId,
    ref.step,
    direction,
  ]);
}

export interface PassCheckpoint {
  lastKey: Key | null;
  rowsUpdated: number;
  rowsScanned: number;
  done: boolean;
}

const PASS = 'change_id = $1 AND run_id = $2 AND step = $3 AND pass = $4';
const passParams = (ref: PassRef) => [ref.changeId, ref.runId, ref.step, ref.pass];

/**
 * Claims the pass for the attempt holding `token` (tokens only grow): the committed checkpoint,
 * or null when a newer attempt owns the pass.
 */
export async function claimPass(db: ClientBase, ref: PassRef, token: number, owner: string): Promise<PassCheckpoint | null> {
  await db.query(
    `INSERT INTO _ferry_change.backfills (change_id, run_id, step, pass) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
    passParams(ref),
  );
  const { rows } = await db.query(
    `UPDATE _ferry_change.backfills SET owner_token = $5, owner = $6, updated_at = now()
      WHERE ${PASS} AND owner_token < $5
      RETURNING last_key, rows_updated::int8 AS updated, rows_scanned::int8 AS scanned, done`,
    [...passParams(ref), token, owner],
  );
  if (rows.length === 0) return null;
  return { lastKey: rows[0].last_key, rowsUpdated: Number(rows[0].updated), rowsScanned: Number(rows[0].scanned), done: rows[0].done };
}

/** Inside a batch's transaction: lock the pass's row and check this attempt still owns it. */
export async function holdsPass(db: ClientBase, ref: PassRef, token: number): Promise<boolean> {
  const { rows } = await db.query(`SELECT owner_token::int8 AS token FROM _ferry_change.backfills WHERE ${PASS} FOR UPDATE`, passParams(ref));
  return rows.length === 1 && Number(rows[0].token) === token;
}

export async function advancePass(db: ClientBase, ref: PassRef, lastKey: Key | null, updated: number, scanned: number, done: boolean): Promise<void> {
  await db.query(
    `UPDATE _ferry_change.backfills
        SET last_key = coalesce($5::text[], last_key), rows_updated = rows_updated + $6, rows_scanned = rows_scanned + $7, done = $8, updated_at = now()
      WHERE ${PASS}`,
    [...passParams(ref), lastKey, updated, scanned, done],
  );
}
