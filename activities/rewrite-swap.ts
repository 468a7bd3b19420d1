/**
 * The swap of a rewrite (docs/architecture.md §10, "Rewrite"), in one short transaction: the
 * original and the shadow locked under a short lock_timeout (a busy lock is LockBusy: the
 * workflow tries again after a backoff, so a waiting swap never stalls writers for long), the
 * rest of the log drained, then the names, indexes, sequences, views and foreign keys moved to
 * the new table. Writers queued behind the lock resolve the table's name again once it is
 * granted, and go on against the new table. Afterwards: the foreign keys validated, the old table
 * dropped when its time has come.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ClientBase } from 'pg';
import { rewriteCaptureId, rewriteNames, rewriteTag } from '../src/change/rewrite-sql';
import { FAILURE } from '../src/core/failure-types';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified, withSuffix } from '../src/core/identifiers';
import { captureNames, GUARD_BYPASS } from '../src/db/capture-sql';
import { sqlState } from '../src/db/errors';
import { dependentViews } from '../src/db/rewrite-catalog';
import { ActivityDeps } from './deps';
import { applyLog, RewriteDataInput, RewriteRef } from './rewrite';

export interface SwapResult {
  /** The swap had committed already (a retry after a lost completion). */
  already: boolean;
  /** Log rows applied inside the swap. */
  drained: number;
  /** From the lock granted to the commit: how long writers waited on the swap. */
  lockedMs: number;
  views: string[];
  /** Foreign keys re-added NOT VALID on the tables that reference the new table. */
  foreignKeys: { table: string; name: string }[];
}

const LOCK_NOT_AVAILABLE = '55P03';

interface ViewDefinition {
  name: QualifiedName;
  definition: string;
  owner: string;
  options: string[];
  comment: string | null;
  grants: string[];
}

async function readView(db: ClientBase, oid: number): Promise<ViewDefinition> {
  const { rows } = await db.query(
    `SELECT n.nspname AS schema, c.relname AS name, pg_catalog.pg_get_viewdef(c.oid) AS definition, pg_catalog.pg_get_userbyid(c.relowner) AS owner,
            coalesce(c.reloptions, '{}') AS options, pg_catalog.obj_description(c.oid, 'pg_class') AS comment,
            array(SELECT a.privilege_type || ' TO ' || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
                         || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
                    FROM aclexplode(c.relacl) a WHERE a.grantee <> c.relowner) AS grants
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`,
    [oid],
  );
  const r = rows[0];
  return { name: { schema: r.schema, name: r.name }, definition: r.definition, owner: r.owner, options: r.options, comment: r.comment, grants: r.grants };
}

export function createRewriteSwapActivities({ connections, logger }: ActivityDeps) {
  async function swapRewrite(input: RewriteDataInput & { lockTimeoutMs: number }): Promise<SwapResult> {
    const tag = rewriteTag(input.changeId, input.step);
    const names = rewriteNames(input.table, tag);
    const table = quoteQualified(input.table);
    const shadow = quoteQualified(names.shadow);
    const log = captureNames(rewriteCaptureId(input.changeId, input.step), 0).log;
    return connections.withClient(input.database, async (db) => {
      const state = await db.query('SELECT to_regclass($1) IS NOT NULL AS shadow, to_regclass($2) IS NOT NULL AS old', [shadow, quoteQualified(names.old)]);
      if (!state.rows[0].shadow && state.rows[0].old) {
        const fks = await db.query(`SELECT conrelid::regclass::text AS table, conname AS name FROM pg_catalog.pg_constraint WHERE contype = 'f' AND confrelid = $1::regclass AND NOT convalidated`, [table]);
        return { already: true, drained: 0, lockedMs: 0, views: [], foreignKeys: fks.rows };
      }
      await db.query('BEGIN');
      try {
        await db.query(`SET LOCAL lock_timeout = '${Math.round(input.lockTimeoutMs)}ms'`);
        await db.query(GUARD_BYPASS);
        await db.query(`LOCK TABLE ${table}, ${shadow} IN ACCESS EXCLUSIVE MODE`);
        const locked = Date.now();
        const drained = await applyLog(db, input.table, names.shadow, log, input.mapping, input.key, Number.MAX_SAFE_INTEGER, false);
        const relid = Number((await db.query('SELECT $1::regclass::oid::int8 AS relid', [table])).rows[0].relid);
        const shadowRelid = Number((await db.query('SELECT $1::regclass::oid::int8 AS relid', [shadow])).rows[0].relid);

        const views: ViewDefinition[] = [];
        for (const v of await dependentViews(db, relid)) views.push(await readView(db, v.oid));
        const fks = (
          await db.query(
            `SELECT conrelid::regclass::text AS table, conname AS name, pg_catalog.pg_get_constraintdef(oid) AS definition
               FROM pg_catalog.pg_constraint WHERE contype = 'f' AND confrelid = $1 AND conrelid <> $1 ORDER BY 1, 2`,
            [relid],
          )
        ).rows as { table: string; name: string; definition: string }[];
        const owned = (
          await db.query(
            `SELECT s.oid::regclass::text AS sequence, a.attname AS column
               FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S'
               JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
              WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refobjid = $1 AND d.deptype = 'a'`,
            [relid],
          )
        ).rows as { sequence: string; column: string }[];
        const shadowColumns = new Set(
          (await db.query(`SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, [shadowRelid])).rows.map((r) => r.attname as string),
        );

        // Identity columns: LIKE gave the shadow sequences of its own; they go on from the original's.
        const identity = await db.query(
          `SELECT pg_catalog.pg_get_serial_sequence($1, a.attname) AS new, pg_catalog.pg_get_serial_sequence($2, a.attname) AS old
             FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1::regclass AND a.attidentity <> '' AND NOT a.attisdropped`,
          [shadow, table],
        );
        for (const seq of identity.rows.filter((r) => r.new && r.old)) {
          const { rows } = await db.query(`SELECT last_value, is_called FROM ${seq.old}`);
          await db.query('SELECT pg_catalog.setval($1::regclass, $2, $3)', [seq.new, rows[0].last_value, rows[0].is_called]);
          // And its name: the old table's sequence steps aside, as its indexes do.
          const oldName = (await db.query('SELECT relname FROM pg_catalog.pg_class WHERE oid = $1::regclass', [seq.old])).rows[0].relname as string;
          await db.query(`ALTER SEQUENCE ${seq.old} RENAME TO ${quoteIdent(withSuffix(oldName, `_ferry_old_${tag}`))}`);
          await db.query(`ALTER SEQUENCE ${seq.new} RENAME TO ${quoteIdent(oldName)}`);
        }
        for (const v of views) await db.query(`DROP VIEW ${quoteQualified(v.name)}`);
        for (const fk of fks) await db.query(`ALTER TABLE ${fk.table} DROP CONSTRAINT ${quoteIdent(fk.name)}`);

        // Indexes: the original's keep their names on the new table (constraints follow their index).
        const indexes = await db.query(
          `SELECT oi.relname AS original, si.relname AS shadow
             FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class oi ON oi.oid = i.indexrelid
             JOIN pg_catalog.pg_class si ON si.relname = $2 || i.indexrelid::text AND si.relnamespace = oi.relnamespace
            WHERE i.indrelid = $1`,
          [relid, names.indexPrefix],
        );
        const schema = quoteIdent(input.table.schema);
        for (const ix of indexes.rows) {
          await db.query(`ALTER INDEX ${schema}.${quoteIdent(ix.original)} RENAME TO ${quoteIdent(withSuffix(ix.original, `_ferry_old_${tag}`))}`);
          await db.query(`ALTER INDEX ${schema}.${quoteIdent(ix.shadow)} RENAME TO ${quoteIdent(ix.original)}`);
        }
        await db.query(`ALTER TABLE ${table} RENAME TO ${quoteIdent(names.old.name)}`);
        await db.query(`ALTER TABLE ${shadow} RENAME TO ${quoteIdent(input.table.name)}`);
        for (const o of owned) {
          if (shadowColumns.has(o.column)) await db.query(`ALTER SEQUENCE ${o.sequence} OWNED BY ${table}.${quoteIdent(o.column)}`);
        }
        for (const v of views) {
          const options = v.options.length ? ` WITH (${v.options.join(', ')})` : '';
          await db.query(`CREATE VIEW ${quoteQualified(v.name)}${options} AS ${v.definition}`);
          await db.query(`ALTER VIEW ${quoteQualified(v.name)} OWNER TO ${quoteIdent(v.owner)}`);
          for (const g of v.grants) await db.query(`GRANT ${g.replace(/ TO /, ` ON ${quoteQualified(v.name)} TO `)}`);
          if (v.comment !== null) await db.query(`COMMENT ON VIEW ${quoteQualified(v.name)} IS ${db.escapeLiteral(v.comment)}`);
        }
        for (const fk of fks) {
          await db.query(`ALTER TABLE ${fk.table} ADD CONSTRAINT ${quoteIdent(fk.name)} ${fk.definition.replace(/ NOT VALID$/, '')} NOT VALID`);
        }
        await db.query('COMMIT');
        const lockedMs = Date.now() - locked;
        logger.info({ changeId: input.changeId, step: input.step, drained, lockedMs, views: views.length, foreignKeys: fks.length }, 'rewrite swapped');
        return { already: false, drained, lockedMs, views: views.map((v) => displayQualified(v.name)), foreignKeys: fks.map((f) => ({ table: f.table, name: f.name })) };
      } catch (err) {
        await db.query('ROLLBACK').catch(() => undefined);
        if (sqlState(err) === LOCK_NOT_AVAILABLE) {
          throw ApplicationFailure.create({
            message: `the swap's lock on ${table} was not granted within ${input.lockTimeoutMs} ms; the workflow tries again`,
            type: FAILURE.LockBusy,
            nonRetryable: true,
            cause: err instanceof Error ? new Error(err.message) : undefined,
          });
        }
        throw err;
      }
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

  /** Drops the old table once keepOld has passed (no CASCADE: whatever still uses it keeps it). */
  async function dropOldTable(input: RewriteRef): Promise<{ dropped: boolean }> {
    const names = rewriteNames(input.table, rewriteTag(input.changeId, input.step));
    return connections.withClient(input.database, async (db) => {
      await db.query("SET lock_timeout = '5s'");
      try {
        const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(names.old)]);
        if (rows[0].present) await db.query(`DROP TABLE ${quoteQualified(names.old)}`);
        logger.info({ changeId: input.changeId, step: input.step, old: names.old }, 'old table dropped');
        return { dropped: rows[0].present as boolean };
      } finally {
        await db.query('RESET lock_timeout');
      }
    });
  }

  return { swapRewrite, validateReferencingForeignKeys, dropOldTable };
}
