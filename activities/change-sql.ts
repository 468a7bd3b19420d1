/**
 * A change plan's statements: each `sql` step (and each `down:`) in one transaction with a short
 * lock_timeout, committed together with its row in `_ferry_change.steps`, so a retry after a
 * lost completion does nothing twice. A busy lock is a LockBusy failure, not retried here: the
 * workflow waits (backoff with jitter, a workflow timer) and tries again until the step's
 * maxWait. SET NOT NULL runs in its safe form. openChange/closeChange register the change in the
 * bookkeeping and remove it.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { Client } from 'pg';
import { FAILURE, postgresFailure, SQLSTATE } from '../src/core/failure-types';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified, withSuffix } from '../src/core/identifiers';
import { forgetChange, markStepDone, registerChange, stepDone, StepRef } from '../src/db/change-bookkeeping';
import { inTransaction } from '../src/db/connections';
import { sqlState } from '../src/db/errors';
import { ActivityDeps } from './deps';

export interface ChangeRef {
  changeId: string;
  runId: string;
  database: string;
}

export interface RunChangeSqlInput extends StepRef {
  database: string;
  sql: string;
  direction: 'up' | 'down';
  lockTimeoutMs: number;
  statementTimeoutMs: number;
}

export interface SetNotNullInput extends StepRef {
  database: string;
  table: QualifiedName;
  column: string;
  /** A step's own SET NOT NULL ('up', the default) or its down: in a rollback. */
  direction?: 'up' | 'down';
  lockTimeoutMs: number;
  statementTimeoutMs: number;
}

export interface RunChangeSqlResult {
  /** The step had committed already (a retry after a lost completion). */
  already: boolean;
}


function lockBusy(what: string, lockTimeoutMs: number, cause: unknown): ApplicationFailure {
  return ApplicationFailure.create({
    message: `${what}: the lock was not granted within the ${lockTimeoutMs} ms lock_timeout (another transaction holds it)`,
    type: FAILURE.LockBusy,
    nonRetryable: true,
    cause: cause instanceof Error ? new Error(cause.message) : undefined,
  });
}

/**
 * The session's own statement_timeout ended the statement (not a cancel from elsewhere, which
 * shares the SQLSTATE and may be retried): the same statement would run out of time again.
 */
function ranOutOfTime(err: unknown): boolean {
  return sqlState(err) === SQLSTATE.queryCanceled && /statement timeout/.test((err as Error).message ?? '');
}

function statementTimedOut(what: string, statementTimeoutMs: number, cause: unknown): ApplicationFailure {
  return ApplicationFailure.create({
    message: `${what}: the statement ran past its ${statementTimeoutMs} ms statement timeout (raise the step's statementTimeout if it must work through rows)`,
    type: postgresFailure(SQLSTATE.queryCanceled),
    nonRetryable: true,
    cause: cause instanceof Error ? new Error(cause.message) : undefined,
  });
}

/** The helper CHECK constraint of the safe SET NOT NULL. */
export function notNullCheckName(column: string): string {
  return withSuffix(column, '_ferry_not_null');
}

export function createChangeSqlActivities({ connections, logger }: ActivityDeps) {
  async function session(database: string, lockTimeoutMs: number, statementTimeoutMs: number): Promise<Client> {
    return connections.client(database, { lockTimeoutMs, statementTimeoutMs });
  }

  async function openChange({ changeId, runId, database }: ChangeRef): Promise<void> {
    await connections.withClient(database, (db) => inTransaction(db, () => registerChange(db, changeId, runId)));
  }

  async function closeChange({ changeId, database }: ChangeRef): Promise<void> {
    await connections.withClient(database, (db) => inTransaction(db, () => forgetChange(db, changeId)));
  }

  async function runChangeSql(input: RunChangeSqlInput): Promise<RunChangeSqlResult> {
    const db = await session(input.database, input.lockTimeoutMs, input.statementTimeoutMs);
    const what = `step ${input.step + 1}${input.direction === 'down' ? ' (down)' : ''}`;
    try {
      try {
        return await inTransaction(db, async () => {
          if (await stepDone(db, input, input.direction)) return { already: true };
          await db.query(input.sql);
          await markStepDone(db, input, input.direction);
          return { already: false };
        });
      } catch (err) {
        if (sqlState(err) !== SQLSTATE.activeSqlTransaction) throw err;
        // A statement PostgreSQL will not run in a transaction block: alone, then its row. Not
        // atomic, so such a statement should be idempotent (IF NOT EXISTS); docs/limits.md says so.
        logger.warn({ changeId: input.changeId, step: input.step }, 'statement cannot run in a transaction; running it alone');
        await db.query(input.sql);
        await markStepDone(db, input, input.direction);
        return { already: false };
      }
    } catch (err) {
      if (sqlState(err) === SQLSTATE.lockNotAvailable) throw lockBusy(what, input.lockTimeoutMs, err);
      if (ranOutOfTime(err)) throw statementTimedOut(what, input.statementTimeoutMs, err);
      throw err;
    } finally {
      await db.end().catch(() => undefined);
    }
  }

  /**
   * SET NOT NULL without a scan under ACCESS EXCLUSIVE: a CHECK (column IS NOT NULL) NOT VALID
   * (a short lock), VALIDATE (a scan under SHARE UPDATE EXCLUSIVE: writes go on), then SET NOT
   * NULL, which PostgreSQL proves from the valid CHECK without scanning, and the CHECK dropped —
   * in the same short transaction. Each stage finds what an interrupted attempt left.
   */
  async function setNotNullSafely(input: SetNotNullInput): Promise<RunChangeSqlResult> {
    const db = await session(input.database, input.lockTimeoutMs, input.statementTimeoutMs);
    const table = quoteQualified(input.table);
    const check = notNullCheckName(input.column);
    const direction = input.direction ?? 'up';
    const what = `step ${input.step + 1}${direction === 'down' ? ' (down)' : ''} (SET NOT NULL on ${displayQualified(input.table)}.${input.column})`;
    try {
      if (await inTransaction(db, () => stepDone(db, input, direction))) return { already: true };
      const state = async () =>
        (
          await db.query<{ not_null: boolean; check_exists: boolean }>(
            `SELECT a.attnotnull AS not_null,
                    EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c WHERE c.conrelid = a.attrelid AND c.conname = $3) AS check_exists
               FROM pg_catalog.pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`,
            [table, input.column, check],
          )
        ).rows[0];
      const before = await state();
      if (!before) throw ApplicationFailure.nonRetryable(`${displayQualified(input.table)} has no column "${input.column}"`, FAILURE.SchemaChanged);
      if (!before.not_null) {
        if (!before.check_exists) {
          await db.query(`ALTER TABLE ${table} ADD CONSTRAINT ${quoteIdent(check)} CHECK (${quoteIdent(input.column)} IS NOT NULL) NOT VALID`);
        }
        Context.current().heartbeat();
        await db.query(`ALTER TABLE ${table} VALIDATE CONSTRAINT ${quoteIdent(check)}`);
      }
      await inTransaction(db, async () => {
        await db.query(`ALTER TABLE ${table} ALTER COLUMN ${quoteIdent(input.column)} SET NOT NULL`);
        await db.query(`ALTER TABLE ${table} DROP CONSTRAINT IF EXISTS ${quoteIdent(check)}`);
        await markStepDone(db, input, direction);
      });
      return { already: false };
    } catch (err) {
      if (sqlState(err) === SQLSTATE.lockNotAvailable) throw lockBusy(what, input.lockTimeoutMs, err);
      throw err;
    } finally {
      await db.end().catch(() => undefined);
    }
  }

  /** After a failed safe SET NOT NULL: its helper CHECK goes (idempotent). */
  async function dropNotNullCheck(input: { database: string; table: QualifiedName; column: string; lockTimeoutMs: number }): Promise<void> {
    const db = await session(input.database, input.lockTimeoutMs, 60_000);
    try {
      await db.query(`ALTER TABLE IF EXISTS ${quoteQualified(input.table)} DROP CONSTRAINT IF EXISTS ${quoteIdent(notNullCheckName(input.column))}`);
    } catch (err) {
      if (sqlState(err) === SQLSTATE.lockNotAvailable) throw lockBusy('dropping the helper CHECK', input.lockTimeoutMs, err);
      throw err;
    } finally {
      await db.end().catch(() => undefined);
    }
  }

  return { openChange, closeChange, runChangeSql, setNotNullSafely, dropNotNullCheck };
}
