/**
 * A rewrite step's work before the swap (docs/architecture.md §10, "Rewrite"): the shadow
 * built with the new shape, the copy through the expressions, the sync from the capture log, the
 * validation in one snapshot, and the clean-up that leaves the original as it was. Capture itself
 * is the online migration's (activities/capture.ts), installed on the original with the
 * rewrite's own capture id. Source and target are the same database here: the original table is
 * the source, the shadow the target.
 */
import { Context } from '@temporalio/activity';
import { checksumSql, copyBatchSql, rewriteCaptureId, rewriteNames, rewriteTag, syncBatchSql } from '../src/change/rewrite-sql';
import { RewriteStep } from '../src/core/change-plan';
import { FAILURE } from '../src/core/failure-types';
import { displayQualified, QualifiedName, quoteQualified } from '../src/core/identifiers';
import { captureNames } from '../src/db/capture-sql';
import { inTransaction } from '../src/db/connections';
import { refusal } from '../src/db/errors';
import { applyLog, CopyRewriteInput, PreparedRewrite, RewriteDataInput, RewriteRef, rewriteProblems } from '../src/db/rewrite-data';
import { ActivityDeps } from './deps';

export type { CopyRewriteInput, PreparedRewrite, RewriteDataInput, RewriteRef } from '../src/db/rewrite-data';

export function createRewriteActivities({ connections, logger }: ActivityDeps) {
  /** Builds the shadow (dropping one a killed attempt left: nothing has been copied yet). */
  async function prepareRewrite({ changeId, database, step }: { changeId: string; database: string; step: RewriteStep }): Promise<PreparedRewrite> {
    return connections.withClient(database, async (db) => {
      const { problems, prepared } = await rewriteProblems(db, changeId, step, true);
      if (problems.length || !prepared) {
        throw refusal(FAILURE.ChangeRefused, `the rewrite of ${displayQualified(step.table)} cannot run:\n${problems.map((p) => `  steps[${step.index}]${p}`).join('\n')}`);
      }
      logger.info({ changeId, step: step.index, shadow: prepared.shadow }, 'rewrite shadow built');
      return prepared;
    });
  }

  /**
   * The copy: keyset batches through the expressions, each its own transaction, resumed after a
   * retry from the last key heartbeated (a batch committed but not heartbeated is skipped by ON
   * CONFLICT DO NOTHING). It runs before any sync: every change since capture began is in the
   * log, applied afterwards from the original's current rows.
   */
  async function copyRewrite(input: CopyRewriteInput): Promise<{ rows: number }> {
    const ctx = Context.current();
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const resumed = ctx.info.heartbeatDetails as { lastKey: string[] | null; rows: number } | undefined;
    let lastKey = resumed?.lastKey ?? null;
    let rows = resumed?.rows ?? 0;
    const started = Date.now();
    const copiedBefore = rows;
    return connections.withClient(input.database, async (db) => {
      // The planner's estimate, for `ferry status` (read from the heartbeat, as a backfill's rows).
      const estimate = await db.query('SELECT greatest(reltuples, 0)::int8 AS n FROM pg_catalog.pg_class WHERE oid = $1::regclass', [quoteQualified(input.table)]);
      const total = Number(estimate.rows[0]?.n ?? 0);
      for (;;) {
        if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason;
        const sql = copyBatchSql(input.table, names.shadow, input.mapping, input.key, lastKey === null);
        const { rows: out } = await db.query(sql, lastKey === null ? [input.batchRows] : [input.batchRows, ...lastKey]);
        if (out[0].read === 0) break;
        lastKey = out[0].last_key;
        rows += out[0].read;
        ctx.heartbeat({ lastKey, rows, total: Math.max(total, rows) });
        if (input.rowsPerSecond) {
          // Heartbeats go on while the rate cap holds the copy back (its own carry the resume point).
          for (;;) {
            const due = ((rows - copiedBefore) / input.rowsPerSecond) * 1000 - (Date.now() - started);
            if (due <= 0) break;
            await ctx.sleep(Math.min(due, 2_000));
            ctx.heartbeat({ lastKey, rows, total: Math.max(total, rows) });
          }
        }
      }
      // Statistics before the swap: the new table must not meet the application's queries unplanned.
      await db.query(`ANALYZE ${quoteQualified(names.shadow)}`);
      logger.info({ changeId: input.changeId, step: input.step, rows }, 'rewrite copy done');
      return { rows };
    });
  }

  /** Applies up to `maxRows` logged changes in batches; returns how many and what is left. */
  async function syncRewrite(input: RewriteDataInput & { maxRows: number }): Promise<{ applied: number; left: number }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const log = captureNames(rewriteCaptureId(input.changeId, input.step), 0).log;
    return connections.withClient(input.database, async (db) => {
      // A heartbeat before the first batch and after each: a round of a large backlog, or one
      // waiting for a lock, shows it is alive, and a lost worker is noticed within the timeout.
      Context.current().heartbeat({ applied: 0 });
      const applied = await applyLog(db, syncBatchSql(input.table, names.shadow, log, input.mapping, input.key), log, input.maxRows, true, (n) => Context.current().heartbeat({ applied: n }));
      const left = Number((await db.query(`SELECT count(*) AS n FROM ${quoteQualified(log)}`)).rows[0].n);
      Context.current().heartbeat({ applied, left });
      return { applied, left };
    });
  }

  /** Count and checksum of the transformed original and of the shadow, in one snapshot. */
  async function validateRewrite(input: RewriteDataInput): Promise<{ rows: number; checksum: string }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const log = captureNames(rewriteCaptureId(input.changeId, input.step), 0).log;
    const sql = checksumSql(input.table, names.shadow, log, input.mapping, input.key);
    return connections.withClient(input.database, async (db) => {
      await db.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      try {
        const a = (await db.query(sql.original)).rows[0];
        Context.current().heartbeat();
        const b = (await db.query(sql.shadow)).rows[0];
        await db.query('COMMIT');
        if (a.rows !== b.rows || a.checksum !== b.checksum) {
          throw refusal(
            FAILURE.ConsistencyBreach,
            `the shadow of ${displayQualified(input.table)} differs from the original through the expressions: ${a.rows} rows (checksum ${a.checksum}) against ${b.rows} (checksum ${b.checksum})`,
          );
        }
        return { rows: Number(a.rows), checksum: a.checksum };
      } catch (err) {
        await db.query('ROLLBACK').catch(() => undefined);
        throw err;
      }
    });
  }

  /** VALIDATE of the shadow's own foreign keys, added NOT VALID (takes no lock writers wait for). */
  async function validateShadowForeignKeys(input: RewriteRef & { foreignKeys: string[]; table: QualifiedName }): Promise<void> {
    await connections.withClient(input.database, async (db) => {
      for (const fk of input.foreignKeys) {
        await db.query(`ALTER TABLE ${quoteQualified(input.table)} VALIDATE CONSTRAINT ${db.escapeIdentifier(fk)}`);
        Context.current().heartbeat();
      }
    });
  }

  /** The undo before the swap: the shadow goes; the original is not touched. Idempotent. */
  /** Drops the shadow if it is there (before the swap); returns its name when it was. */
  async function dropRewriteShadow(input: RewriteRef): Promise<{ dropped: string | null }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    const present = await connections.withClient(input.database, async (db) =>
      inTransaction(db, async () => {
        await db.query("SET LOCAL lock_timeout = '5s'");
        const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(names.shadow)]);
        await db.query(`DROP TABLE IF EXISTS ${quoteQualified(names.shadow)}`);
        return rows[0].present as boolean;
      }),
    );
    logger.info({ changeId: input.changeId, step: input.step, present }, 'rewrite shadow dropped');
    return { dropped: present ? displayQualified(names.shadow) : null };
  }

  return { prepareRewrite, copyRewrite, syncRewrite, validateRewrite, validateShadowForeignKeys, dropRewriteShadow };
}
