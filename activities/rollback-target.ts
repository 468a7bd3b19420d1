/**
 * Compensation for prepareTarget and the copy: drop exactly the objects this migration created
 * (as `_ferry.created_objects` recorded them, newest first), empty the pre-existing tables it
 * wrote into, and remove its bookkeeping. Idempotent: a second run finds nothing to do.
 *
 * releaseBookkeeping: after success, remove the migration's checkpoints and, when no other
 * migration uses it, the `_ferry` schema.
 */
import { ClientBase } from 'pg';
import { bookkeepingExists, lockBookkeeping } from '../src/db/bookkeeping';
import { inTransaction } from '../src/db/connections';
import { asActivityFailure } from '../src/db/errors';
import { ActivityDeps } from './deps';

export interface TargetRef {
  migrationId: string;
  target: string;
}

const DROP: Record<string, (name: string) => string> = {
  table: (name) => `DROP TABLE IF EXISTS ${name} CASCADE`,
  sequence: (name) => `DROP SEQUENCE IF EXISTS ${name}`,
  type: (name) => `DROP TYPE IF EXISTS ${name}`,
  schema: (name) => `DROP SCHEMA IF EXISTS ${name}`,
  'existing-table': (name) => `DELETE FROM ${name}`,
};

async function forgetMigration(db: ClientBase, migrationId: string): Promise<void> {
  await db.query('DELETE FROM _ferry.checkpoints WHERE migration_id = $1', [migrationId]);
  await db.query('DELETE FROM _ferry.dirty WHERE migration_id = $1', [migrationId]);
  await db.query('DELETE FROM _ferry.created_objects WHERE migration_id = $1', [migrationId]);
  await db.query('DELETE FROM _ferry.migrations WHERE id = $1', [migrationId]);
  const others = await db.query('SELECT 1 FROM _ferry.migrations LIMIT 1');
  if (others.rowCount === 0) await db.query('DROP SCHEMA _ferry CASCADE');
}

export function createRollbackTarget({ connections, logger }: ActivityDeps) {
  async function dropTargetObjects({ migrationId, target }: TargetRef): Promise<{ dropped: string[] }> {
    const dropped: string[] = [];
    try {
      await connections.withClient(target, (db) =>
        inTransaction(db, async () => {
          await lockBookkeeping(db);
          if (!(await bookkeepingExists(db))) return;
          const { rows } = await db.query(
            'SELECT kind, name FROM _ferry.created_objects WHERE migration_id = $1 ORDER BY seq DESC',
            [migrationId],
          );
          for (const { kind, name } of rows) {
            await db.query(DROP[kind](name));
            dropped.push(`${kind} ${name}`);
          }
          await forgetMigration(db, migrationId);
        }),
      );
      logger.info({ migrationId, dropped }, 'target rolled back');
      return { dropped };
    } catch (err) {
      throw asActivityFailure(err, 'dropTargetObjects');
    }
  }

  async function releaseBookkeeping({ migrationId, target }: TargetRef): Promise<void> {
    try {
      await connections.withClient(target, (db) =>
        inTransaction(db, async () => {
          await lockBookkeeping(db);
          if (await bookkeepingExists(db)) await forgetMigration(db, migrationId);
        }),
      );
    } catch (err) {
      throw asActivityFailure(err, 'releaseBookkeeping');
    }
  }

  return { dropTargetObjects, releaseBookkeeping };
}
