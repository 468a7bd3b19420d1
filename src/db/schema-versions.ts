/**
 * Ferry's own schemas (`_ferry` on targets, `_ferry_capture` on sources) are versioned with
 * numbered migrations, applied in order and recorded in the schema's `schema_versions` table.
 * A newer Ferry upgrades the bookkeeping an older one left by running the steps it lacks; a Ferry
 * that finds a version newer than it knows refuses to touch it rather than guess.
 *
 * Callers hold the schema's advisory lock, inside a transaction, so two workers never upgrade the
 * same schema at once and a failed step leaves the version where it was.
 */
import { ClientBase } from 'pg';
import { FAILURE } from '../core/failure-types';
import { quoteIdent } from '../core/identifiers';
import { refusal } from './errors';

export interface SchemaStep {
  version: number;
  /** What the step does, recorded beside its number. */
  name: string;
  sql: string;
}

export interface VersionedSchema {
  schema: string;
  steps: readonly SchemaStep[];
  /**
   * For schemas an unversioned Ferry created: the last step already in place, read from the
   * catalog (0 when the schema holds nothing of Ferry's yet).
   */
  baseline?: (db: ClientBase) => Promise<number>;
}

/** Never retried: only workers of the Ferry that upgraded the schema can use it. */
function schemaTooNew(schema: string, found: number, known: number): Error {
  return refusal(FAILURE.SchemaTooNew, `${schema} is at version ${found}, newer than this Ferry knows (${known}): run workers of the Ferry version that upgraded it`);
}

async function currentVersion(db: ClientBase, target: VersionedSchema): Promise<number | null> {
  const { rows } = await db.query(`SELECT to_regclass($1) IS NOT NULL AS present`, [`${quoteIdent(target.schema)}.schema_versions`]);
  if (!rows[0].present) return null;
  const versions = await db.query(`SELECT coalesce(max(version), 0)::int AS v FROM ${quoteIdent(target.schema)}.schema_versions`);
  return versions.rows[0].v as number;
}

/** Brings `target.schema` to the newest step; returns the version it ended at. */
export async function migrateSchema(db: ClientBase, target: VersionedSchema): Promise<number> {
  const schema = quoteIdent(target.schema);
  const known = Math.max(0, ...target.steps.map((s) => s.version));
  let version = await currentVersion(db, target);
  if (version !== null && version >= known) {
    if (version > known) throw schemaTooNew(target.schema, version, known);
    return version;
  }
  if (version === null) {
    version = target.baseline ? await target.baseline(db) : 0;
    await db.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await db.query(
      `CREATE TABLE IF NOT EXISTS ${schema}.schema_versions (
         version    int PRIMARY KEY,
         name       text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    for (const step of target.steps.filter((s) => s.version <= version!)) {
      await db.query(`INSERT INTO ${schema}.schema_versions (version, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, [step.version, `${step.name} (found in place)`]);
    }
  }
  for (const step of [...target.steps].sort((a, b) => a.version - b.version)) {
    if (step.version <= version) continue;
    await db.query(step.sql);
    await db.query(`INSERT INTO ${schema}.schema_versions (version, name) VALUES ($1, $2)`, [step.version, step.name]);
    version = step.version;
  }
  return version;
}

/**
 * Drops the schema once Ferry's tables in it are gone, never with CASCADE: anything else found in
 * it (an object another tool or an older Ferry put there) keeps the schema, and is left alone.
 */
export async function dropSchemaIfEmpty(db: ClientBase, schema: string, tables: readonly string[]): Promise<boolean> {
  for (const table of [...tables, 'schema_versions']) await db.query(`DROP TABLE IF EXISTS ${quoteIdent(schema)}.${quoteIdent(table)}`);
  const { rows } = await db.query(
    `SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid) + (SELECT count(*) FROM pg_proc WHERE pronamespace = n.oid)
          + (SELECT count(*) FROM pg_type WHERE typnamespace = n.oid AND typrelid = 0 AND typelem = 0) AS left
       FROM pg_namespace n WHERE nspname = $1`,
    [schema],
  );
  if (rows.length === 0) return true;
  if (Number(rows[0].left) > 0) return false;
  await db.query(`DROP SCHEMA ${quoteIdent(schema)}`);
  return true;
}
