/**
 * Compensation for prepareTarget and the copy: drop exactly the objects this migration created
 * (as `_ferry.created_objects` recorded them, newest first), empty the pre-existing tables it
 * wrote into, and remove its bookkeeping. Idempotent: a second run finds nothing to do.
 *
 * releaseBookkeeping: after success, remove the migration's checkpoints and, when no other
 * migration uses it, the `_ferry` schema (without CASCADE: an object someone else put there
 * keeps it).
 */
import { ClientBase } from 'pg';
import { BOOKKEEPING, BOOKKEEPING_TABLES, bookkeepingExists, lockBookkeeping } from '../src/db/bookkeeping';
import { dropSchemaIfEmpty } from '../src/db/schema-versions';
import { inTransaction } from '../src/db/connections';
import { sqlState } from '../src/db/errors';
import { parseQualifiedName, quoteQualified } from '../src/core/identifiers';
import { ActivityDeps } from './deps';

export interface TargetRef {
  migrationId: string;
  target: string;
}

/**
 * The stored name only looks an object up; the statement uses PostgreSQL's own quoting of the
 * object it found. Whoever can write `_ferry.created_objects` can then at most make rollback drop
 * an object of the recorded kind, never run SQL of their choosing.
 */
const REGCLASS = 'SELECT to_regclass($1)::text AS q';

/** Per recorded kind: how to find the object from its stored name, and how to undo it. */
const UNDO: Record<string, { find: string; undo: (quoted: string) => string }> = {
  table: { find: REGCLASS, undo: (q) => `DROP TABLE IF EXISTS ${q} CASCADE` },
  'existing-table': { find: REGCLASS, undo: (q) => `DELETE FROM ${q}` },
  sequence: { find: REGCLASS, undo: (q) => `DROP SEQUENCE IF EXISTS ${q}` },
  type: { find: 'SELECT to_regtype($1)::text AS q', undo: (q) => `DROP TYPE IF EXISTS ${q}` },
  // Recorded as Ferry quotes it (always double-quoted), matched against that form.
  schema: {
    find: `SELECT quote_ident(nspname) AS q FROM pg_namespace WHERE '"' || replace(nspname, '"', '""') || '"' = $1`,
    undo: (q) => `DROP SCHEMA IF EXISTS ${q}`,
  },
};

/** How to drop each type of object a dump's pass may create (pg_identify_object's type → DROP's word). */
const DROP_WORDS: Record<string, string> = {
  schema: 'SCHEMA', extension: 'EXTENSION', type: 'TYPE', domain: 'DOMAIN', function: 'FUNCTION', procedure: 'PROCEDURE',
  aggregate: 'AGGREGATE', view: 'VIEW', 'materialized view': 'MATERIALIZED VIEW', sequence: 'SEQUENCE', table: 'TABLE',
  'foreign table': 'FOREIGN TABLE', collation: 'COLLATION', conversion: 'CONVERSION', operator: 'OPERATOR',
  'operator class': 'OPERATOR CLASS', 'operator family': 'OPERATOR FAMILY', 'statistics object': 'STATISTICS',
  'text search configuration': 'TEXT SEARCH CONFIGURATION', 'text search dictionary': 'TEXT SEARCH DICTIONARY',
  'text search parser': 'TEXT SEARCH PARSER', 'text search template': 'TEXT SEARCH TEMPLATE',
};

/**
 * An object a dump's pass created (recorded by its address, src/db/schema-objects.ts): looked up
 * by PostgreSQL (pg_get_object_address, which fails when it is gone), named by PostgreSQL
 * (pg_identify_object) and dropped without CASCADE — what depends on it was created later and is
 * gone already; anything else keeps it, and the rollback fails saying so.
 */
async function dropObject(db: ClientBase, recorded: string): Promise<string | null> {
  let address: { type: string; names: string[]; args: string[] };
  try {
    address = JSON.parse(recorded);
  } catch {
    return null; // not an address: names nothing Ferry created
  }
  await db.query('SAVEPOINT ferry_find_object');
  let found: { type: string; identity: string } | undefined;
  try {
    const { rows } = await db.query(
      `SELECT o.type, o.identity FROM pg_catalog.pg_get_object_address($1, $2::text[], $3::text[]) AS a,
              pg_catalog.pg_identify_object(a.classid, a.objid, a.objsubid) AS o`,
      [address.type, address.names, address.args],
    );
    found = rows[0];
    await db.query('RELEASE SAVEPOINT ferry_find_object');
  } catch {
    await db.query('ROLLBACK TO SAVEPOINT ferry_find_object');
    return null; // already gone: rollback is idempotent
  }
  const word = found && DROP_WORDS[found.type];
  if (!found || !word) return null;
  await db.query(`DROP ${word} IF EXISTS ${found.identity}`);
  return `${found.type} ${found.identity}`;
}

async function forgetMigration(db: ClientBase, migrationId: string): Promise<void> {
  await db.query('DELETE FROM _ferry.checkpoints WHERE migration_id = $1', [migrationId]);
  await db.query('DELETE FROM _ferry.dirty WHERE migration_id = $1', [migrationId]);
  await db.query('DELETE FROM _ferry.created_objects WHERE migration_id = $1', [migrationId]);
  await db.query('DELETE FROM _ferry.migrations WHERE id = $1', [migrationId]);
  const others = await db.query('SELECT 1 FROM _ferry.migrations LIMIT 1');
  if (others.rowCount === 0) await dropSchemaIfEmpty(db, BOOKKEEPING.schema, BOOKKEEPING_TABLES);
}

/** Objects a rollback drops in one transaction at first (halved while the server's lock table cannot hold them). */
const ROLLBACK_BATCH = 500;

/**
 * Drops up to `batch` of the migration's recorded objects, newest first, and forgets their rows,
 * in the caller's transaction; forgets the migration when none is left. True while more remain.
 */
async function dropBatch(db: ClientBase, migrationId: string, batch: number, dropped: string[]): Promise<boolean> {
  await lockBookkeeping(db);
  if (!(await bookkeepingExists(db))) return false;
  const { rows } = await db.query('SELECT seq, kind, name FROM _ferry.created_objects WHERE migration_id = $1 ORDER BY seq DESC LIMIT $2', [migrationId, batch]);
  for (const { kind, name } of rows) {
    if (kind === 'object') {
      const object = await dropObject(db, name);
      if (object) dropped.push(object);
      continue;
    }
    if (!UNDO[kind]) continue; // a mark, not an object (objects-restored)
    // A name that is not a qualified identifier names nothing Ferry created: skip it.
    const parsed = kind === 'schema' ? name : parseQualifiedName(name);
    if (typeof parsed === 'string' && kind !== 'schema') continue;
    const lookup = typeof parsed === 'string' ? parsed : quoteQualified(parsed);
    const found = await db.query<{ q: string | null }>(UNDO[kind].find, [lookup]);
    const quoted = found.rows[0]?.q;
    if (!quoted) continue; // already gone: rollback is idempotent
    await db.query(UNDO[kind].undo(quoted));
    dropped.push(`${kind} ${quoted}`);
  }
  if (rows.length === batch) {
    await db.query('DELETE FROM _ferry.created_objects WHERE migration_id = $1 AND seq >= $2', [migrationId, rows[rows.length - 1].seq]);
    return true;
  }
  await forgetMigration(db, migrationId);
  return false;
}

export function createRollbackTarget({ connections, logger }: ActivityDeps) {
  /**
   * In transactions of up to ROLLBACK_BATCH objects, each dropping its objects and forgetting
   * their rows together: a drop takes a lock per relation (a table's indexes and TOAST table
   * too) until its transaction ends, and the server's lock table (max_locks_per_transaction ×
   * connections) held about 1,500 tables' drops here. A batch the lock table cannot hold
   * ("out of shared memory", 53200) is tried again at half the size.
   */
  async function dropTargetObjects({ migrationId, target }: TargetRef): Promise<{ dropped: string[] }> {
    const dropped: string[] = [];
    await connections.withClient(target, async (db) => {
      for (let batch = ROLLBACK_BATCH; ; ) {
        const done: string[] = [];
        try {
          const more = await inTransaction(db, () => dropBatch(db, migrationId, batch, done));
          dropped.push(...done);
          if (!more) return;
        } catch (err) {
          if (sqlState(err) !== '53200' || batch === 1) throw err;
          batch = Math.max(1, Math.floor(batch / 2));
        }
      }
    });
    logger.info({ migrationId, dropped: dropped.length }, 'target rolled back');
    return { dropped };
  }

  async function releaseBookkeeping({ migrationId, target }: TargetRef): Promise<void> {
    await connections.withClient(target, (db) =>
      inTransaction(db, async () => {
        await lockBookkeeping(db);
        if (await bookkeepingExists(db)) await forgetMigration(db, migrationId);
      }),
    );
  }

  return { dropTargetObjects, releaseBookkeeping };
}
