/**
 * The swap of a rewrite (docs/architecture.md §10, "Rewrite"), in one short transaction: the
 * original and the shadow locked under a short lock_timeout (a busy lock is LockBusy: the
 * workflow tries again after a backoff, so a waiting swap never stalls writers for long), the
 * rest of the log drained, then the names, indexes, sequences, views and foreign keys moved to
 * the new table. Writers queued behind the lock resolve the table's name again once it is
 * granted, and go on against the new table. The same transaction puts capture on the new table,
 * so that `ferry revert` within keepOld can carry every write made since back to the old table
 * (the casts back, in batches) and swap back the same way. Afterwards: the foreign keys
 * validated, the old table dropped when its time has come.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ClientBase, PoolClient } from 'pg';
import { checksumSql, ColumnMapping, revertBatchSql, rewriteCaptureId, rewriteNames, rewriteTag, RewriteKey, syncBatchSql } from '../src/change/rewrite-sql';
import { revertCaptureId } from '../src/core/change-plan';
import { FAILURE, SQLSTATE } from '../src/core/failure-types';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified, withSuffix } from '../src/core/identifiers';
import { captureNames, GUARD_BYPASS, quotedLog } from '../src/db/capture-sql';
import { inTransaction } from '../src/db/connections';
import { refusal, sqlState } from '../src/db/errors';
import { attachDependents, carryIdentity, detachDependents, moveOutgoingForeignKeys, readDependents, relid, swapIndexNames } from '../src/db/table-swap';
import { installCaptureIn } from '../src/db/capture-install';
import { ActivityDeps } from './deps';
import { applyLog, RewriteDataInput, RewriteRef } from '../src/db/rewrite-data';

export interface SwapResult {
  /** The swap had committed already (a retry after a lost completion). */
  already: boolean;
  /** Log rows applied inside the swap. */
  drained: number;
  /** From the lock granted to the commit: how long writers waited on the swap. */
  lockedMs: number;
  views: string[];
  /**
   * Foreign keys re-added NOT VALID: on the tables that reference the table, and the table's own
   * that the one taking its name had not got (a revert's old table); validated after the swap.
   */
  foreignKeys: { table: string; name: string }[];
}


/** The new table's name once a revert has put the old one back (kept for keepOld, then dropped). */
export function revertedName(table: QualifiedName, tag: string): QualifiedName {
  return { schema: table.schema, name: withSuffix(table.name, `_ferry_rev_${tag}`) };
}

/** Foreign keys to and from the table still NOT VALID: a swap that had committed already left them to validate. */
async function unvalidatedForeignKeys(db: ClientBase, table: string): Promise<{ table: string; name: string }[]> {
  const { rows } = await db.query(
    `SELECT conrelid::regclass::text AS table, conname AS name FROM pg_catalog.pg_constraint
      WHERE contype = 'f' AND (confrelid = $1::regclass OR conrelid = $1::regclass) AND NOT convalidated`,
    [table],
  );
  return rows;
}

/**
 * One swap transaction: both tables locked under the lock_timeout (LockBusy when not granted:
 * the workflow tries again after a backoff), then `work`, then COMMIT.
 */
async function inSwap<T>(db: ClientBase, tables: string[], lockTimeoutMs: number, work: (locked: number) => Promise<T>): Promise<T> {
  await db.query('BEGIN');
  try {
    await db.query(`SET LOCAL lock_timeout = '${Math.round(lockTimeoutMs)}ms'`);
    await db.query(GUARD_BYPASS);
    await db.query(`LOCK TABLE ${tables.join(', ')} IN ACCESS EXCLUSIVE MODE`);
    const result = await work(Date.now());
    await db.query('COMMIT');
    return result;
  } catch (err) {
    await db.query('ROLLBACK').catch(() => undefined);
    if (sqlState(err) === SQLSTATE.lockNotAvailable) {
      throw ApplicationFailure.create({
        message: `the swap's lock on ${tables[0]} was not granted within ${lockTimeoutMs} ms`,
        type: FAILURE.LockBusy,
        nonRetryable: true,
        cause: err instanceof Error ? new Error(err.message) : undefined,
      });
    }
    throw err;
  }
}

/**
 * What one swap exchanges: `incoming` takes the table's name (with its indexes' names, its
 * sequences' positions, the views and foreign keys on it) and the table steps aside as
 * `outgoing`, after the rest of `log` has been applied to `incoming` with both locked.
 */
interface Exchange {
  incoming: QualifiedName;
  outgoing: QualifiedName;
  log: QualifiedName;
  /** The statements that apply a batch of the log to `incoming`. */
  batchSql: string[];
  /** Appended to the names that step aside (indexes, sequences). */
  asideSuffix: string;
  /** The table's index names, each with the index of `incoming` that takes it. */
  indexPairs(db: ClientBase): Promise<{ current: string; replacement: string }[]>;
  /** Inside the same transaction, once the names have moved. */
  afterwards?(db: PoolClient): Promise<void>;
}

/** One exchange, in one swap transaction; reports what moved. */
async function exchange(db: PoolClient, table: QualifiedName, lockTimeoutMs: number, x: Exchange): Promise<SwapResult> {
  const name = quoteQualified(table);
  return inSwap(db, [name, quoteQualified(x.incoming)], lockTimeoutMs, async (locked) => {
    const drained = await applyLog(db, x.batchSql, x.log, Number.MAX_SAFE_INTEGER, false);
    const leaving = await relid(db, table);
    const dependents = await readDependents(db, leaving);
    await carryIdentity(db, x.incoming, table, x.asideSuffix);
    await detachDependents(db, dependents);
    const outgoing = await moveOutgoingForeignKeys(db, leaving, await relid(db, x.incoming), x.incoming);
    await swapIndexNames(db, table.schema, await x.indexPairs(db), x.asideSuffix);
    await db.query(`ALTER TABLE ${name} RENAME TO ${quoteIdent(x.outgoing.name)}`);
    await db.query(`ALTER TABLE ${quoteQualified(x.incoming)} RENAME TO ${quoteIdent(table.name)}`);
    await attachDependents(db, dependents, table);
    await x.afterwards?.(db);
    return {
      already: false,
      drained,
      lockedMs: Date.now() - locked,
      views: dependents.views.map((v) => displayQualified(v.name)),
      foreignKeys: [...dependents.foreignKeys.map((f) => ({ table: f.table, name: f.name })), ...outgoing.map((f) => ({ ...f, table: quoteQualified(table) }))],
    };
  });
}

/** The names of a table's indexes. */
async function indexNames(db: ClientBase, table: string): Promise<string[]> {
  const { rows } = await db.query(`SELECT c.relname AS name FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass`, [table]);
  return rows.map((r) => r.name as string);
}

export function createRewriteSwapActivities({ connections, logger }: ActivityDeps) {
  async function swapRewrite(input: RewriteDataInput & { lockTimeoutMs: number }): Promise<SwapResult> {
    const tag = rewriteTag(input.changeId, input.step);
    const names = rewriteNames(input.table, tag);
    const table = quoteQualified(input.table);
    const log = captureNames(rewriteCaptureId(input.changeId, input.step), 0).log;
    return connections.withClient(input.database, async (db) => {
      const state = await db.query('SELECT to_regclass($1) IS NOT NULL AS shadow, to_regclass($2) IS NOT NULL AS old', [quoteQualified(names.shadow), quoteQualified(names.old)]);
      if (!state.rows[0].shadow && state.rows[0].old) return { already: true, drained: 0, lockedMs: 0, views: [], foreignKeys: await unvalidatedForeignKeys(db, table) };
      const result = await exchange(db, input.table, input.lockTimeoutMs, {
        incoming: names.shadow,
        outgoing: names.old,
        log,
        batchSql: syncBatchSql(input.table, names.shadow, log, input.mapping, input.key),
        asideSuffix: `_ferry_old_${tag}`,
        // The original's indexes keep their names on the new table (constraints follow their index).
        indexPairs: async (db) =>
          (
            await db.query(
              `SELECT oi.relname AS current, si.relname AS replacement
                 FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class oi ON oi.oid = i.indexrelid
                 JOIN pg_catalog.pg_class si ON si.relname = $2 || i.indexrelid::text AND si.relnamespace = oi.relnamespace
                WHERE i.indrelid = $1::regclass`,
              [table, names.indexPrefix],
            )
          ).rows,
        // From here on the new table's writes are logged too, for a revert within keepOld.
        afterwards: async (db) => {
          const revertKey = input.key.columns.map((k, i) => ({ ...k, type: input.key.shadowTypes[i] }));
          await installCaptureIn(db, { migrationId: revertCaptureId(input.changeId, input.step), source: input.database, tables: [{ index: 0, source: input.table, keyColumns: revertKey }] }, { guard: false });
        },
      });
      logger.info({ changeId: input.changeId, step: input.step, drained: result.drained, lockedMs: result.lockedMs, views: result.views.length, foreignKeys: result.foreignKeys.length }, 'rewrite swapped');
      return result;
    });
  }

  /**
   * What a revert needs: the old table's columns written back from the new table's columns of
   * the same name, cast to the old types (columns the new table lacks keep their old values, or
   * their defaults in rows written since the swap); the key with both sides' types. Refused when
   * the old table or the capture since the swap is gone.
   */
  async function prepareRevert(input: RewriteRef): Promise<{ mapping: ColumnMapping[]; key: RewriteKey }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    return connections.withClient(input.database, async (db) => {
      const present = await db.query(`SELECT to_regclass($1) IS NOT NULL AS old, to_regclass($2) IS NOT NULL AS log`, [
        quoteQualified(names.old),
        quotedLog(revertCaptureId(input.changeId, input.step), 0),
      ]);
      if (!present.rows[0].old || !present.rows[0].log) {
        throw refusal(FAILURE.ChangeRefused, `${displayQualified(input.table)} cannot be reverted: ${present.rows[0].old ? 'the writes since the swap were not captured' : 'its old table is gone'}`);
      }
      const columns = async (t: QualifiedName) =>
        (
          await db.query(
            `SELECT attname AS name, pg_catalog.format_type(atttypid, atttypmod) AS type FROM pg_catalog.pg_attribute
              WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`,
            [quoteQualified(t)],
          )
        ).rows as { name: string; type: string }[];
      const now = new Map((await columns(input.table)).map((c) => [c.name, c.type]));
      const old = await columns(names.old);
      const mapping = old.filter((c) => now.has(c.name)).map((c) => ({ column: c.name, type: c.type, expression: `CAST(${quoteIdent(c.name)} AS ${c.type})` }));
      const keyNames = (
        await db.query(
          `SELECT a.attname AS name FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
            WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)`,
          [quoteQualified(names.old)],
        )
      ).rows.map((r) => r.name as string);
      const oldTypes = new Map(old.map((c) => [c.name, c.type]));
      const key: RewriteKey = {
        columns: keyNames.map((name) => ({ name, type: now.get(name)!, collatable: false })),
        shadowTypes: keyNames.map((name) => oldTypes.get(name)!),
      };
      return { mapping, key };
    });
  }

  /** Applies up to `maxRows` of the writes logged since the swap to the old table; returns how many and what is left. */
  async function syncRevert(input: RewriteDataInput & { maxRows: number }): Promise<{ applied: number; left: number }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const log = captureNames(revertCaptureId(input.changeId, input.step), 0).log;
    return connections.withClient(input.database, async (db) => {
      Context.current().heartbeat({ applied: 0 });
      const applied = await applyLog(db, revertBatchSql(input.table, names.old, log, input.mapping, input.key), log, input.maxRows, true, (n) => Context.current().heartbeat({ applied: n }));
      const left = Number((await db.query(`SELECT count(*) AS n FROM ${quoteQualified(log)}`)).rows[0].n);
      return { applied, left };
    });
  }

  /** Count and checksum of the new table through the casts back and of the old table's same columns, in one snapshot. */
  async function validateRevert(input: RewriteDataInput): Promise<{ rows: number }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const log = captureNames(revertCaptureId(input.changeId, input.step), 0).log;
    const sql = checksumSql(input.table, names.old, log, input.mapping, input.key);
    return connections.withClient(input.database, (db) =>
      inTransaction(db, async () => {
        await db.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
        const a = (await db.query(sql.original)).rows[0];
        Context.current().heartbeat();
        const b = (await db.query(sql.shadow)).rows[0];
        if (a.rows !== b.rows || a.checksum !== b.checksum) {
          throw refusal(FAILURE.ConsistencyBreach, `the old table of ${displayQualified(input.table)} differs from the new one after the writes were carried back: ${a.rows} rows against ${b.rows}`);
        }
        return { rows: Number(a.rows) };
      }),
    );
  }

  /**
   * The swap back, as the swap: both tables locked, the rest of the log drained, the new table
   * renamed aside (`<name>_ferry_rev_<tag>`, its capture dropped with it locked), the old table
   * and its indexes and sequences given their names again, views and foreign keys moved.
   */
  async function swapRevert(input: RewriteDataInput & { lockTimeoutMs: number }): Promise<SwapResult> {
    const tag = rewriteTag(input.changeId, input.step);
    const names = rewriteNames(input.table, tag);
    const aside = revertedName(input.table, tag);
    const table = quoteQualified(input.table);
    const old = quoteQualified(names.old);
    const log = captureNames(revertCaptureId(input.changeId, input.step), 0).log;
    return connections.withClient(input.database, async (db) => {
      const state = await db.query('SELECT to_regclass($1) IS NOT NULL AS old, to_regclass($2) IS NOT NULL AS aside', [old, quoteQualified(aside)]);
      if (!state.rows[0].old && state.rows[0].aside) return { already: true, drained: 0, lockedMs: 0, views: [], foreignKeys: await unvalidatedForeignKeys(db, table) };
      const result = await exchange(db, input.table, input.lockTimeoutMs, {
        incoming: names.old,
        outgoing: aside,
        log,
        batchSql: revertBatchSql(input.table, names.old, log, input.mapping, input.key),
        asideSuffix: `_ferry_rev_${tag}`,
        // The old table's indexes had stepped aside with the swap's suffix: they take their names back.
        indexPairs: async (db) => {
          const oldIndexes = new Set(await indexNames(db, old));
          return (await indexNames(db, table)).map((name) => ({ current: name, replacement: withSuffix(name, `_ferry_old_${tag}`) })).filter((p) => oldIndexes.has(p.replacement));
        },
      });
      logger.info({ changeId: input.changeId, step: input.step, drained: result.drained, lockedMs: result.lockedMs }, 'rewrite reverted');
      return result;
    });
  }

  /** VALIDATE of the foreign keys re-added NOT VALID at the swap: no lock writers wait for. */
  async function validateReferencingForeignKeys(input: { database: string; foreignKeys: { table: string; name: string }[] }): Promise<void> {
    await connections.withClient(input.database, async (db) => {
      for (const fk of input.foreignKeys) {
        await db.query(`ALTER TABLE ${fk.table} VALIDATE CONSTRAINT ${quoteIdent(fk.name)}`);
        Context.current().heartbeat();
      }
    });
  }

  /** Drops a table of the rewrite that was kept for keepOld, if it is still there (no CASCADE: whatever still uses it keeps it). */
  async function dropKept(input: RewriteRef, table: QualifiedName, what: string): Promise<{ dropped: boolean }> {
    return connections.withClient(input.database, async (db) => {
      await db.query("SET lock_timeout = '5s'");
      try {
        const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(table)]);
        if (rows[0].present) await db.query(`DROP TABLE ${quoteQualified(table)}`);
        logger.info({ changeId: input.changeId, step: input.step, table }, `${what} dropped`);
        return { dropped: rows[0].present as boolean };
      } finally {
        await db.query('RESET lock_timeout');
      }
    });
  }

  /** Drops the old table once keepOld has passed. */
  async function dropOldTable(input: RewriteRef): Promise<{ dropped: boolean }> {
    return dropKept(input, rewriteNames(input.table, rewriteTag(input.changeId, input.step)).old, 'old table');
  }

  /** Drops the new table a revert put aside, once keepOld has passed again. */
  async function dropRevertedTable(input: RewriteRef): Promise<{ dropped: boolean }> {
    return dropKept(input, revertedName(input.table, rewriteTag(input.changeId, input.step)), 'reverted table');
  }

  return { swapRewrite, prepareRevert, syncRevert, validateRevert, swapRevert, validateReferencingForeignKeys, dropOldTable, dropRevertedTable };
}
