/**
 * What a migration that ended without finishing (terminated, say, or abandoned) left behind,
 * read from the bookkeeping on both sides — all `ferry cleanup` needs, with no workflow state.
 */
import { bookkeepingExists } from '../src/db/bookkeeping';
import { freezeFunction, readFreezeState } from '../src/db/capture-sql';
import { quoteQualified } from '../src/core/identifiers';
import { ActivityDeps } from './deps';

export interface OutcomeInput {
  migrationId: string;
  source: string;
  target: string;
}

export interface MigrationOutcome {
  /** The target holds the migration's result: its tables must stay. */
  completed: boolean;
  /** Ferry's bookkeeping for the migration is still on the target. */
  targetPrepared: boolean;
}

export function createCleanupActivities({ connections }: ActivityDeps) {
  async function migrationOutcome(input: OutcomeInput): Promise<MigrationOutcome> {
    const target = await connections.withClient(input.target, async (db) => {
      if (!(await bookkeepingExists(db))) return { prepared: false, completed: false };
      const { rows } = await db.query(
        `SELECT to_jsonb(m) ->> 'completed_at' IS NOT NULL AS completed FROM _ferry.migrations m WHERE id = $1`,
        [input.migrationId],
      );
      return { prepared: rows.length > 0, completed: rows[0]?.completed === true };
    });
    // The source tells too: a freeze that says "moved" or "released", or the freeze an older
    // Ferry installed only at cutover, is there only after a completed cutover.
    const sourceSaysCompleted = await connections.withClient(input.source, async (db) => {
      const state = await readFreezeState(db, input.migrationId);
      if (state !== 'absent') return state === 'moved' || state === 'released';
      const legacy = await db.query('SELECT to_regprocedure($1) IS NOT NULL AS present', [`${quoteQualified(freezeFunction(input.migrationId))}()`]);
      return legacy.rows[0].present as boolean;
    });
    return { completed: target.completed || sourceSaysCompleted, targetPrepared: target.prepared };
  }

  return { migrationOutcome };
}
