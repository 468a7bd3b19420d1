/**
 * Is a table's change capture still to be trusted? Checked by every sync slice, the cutover's
 * final drain included: capture that was removed or disabled behind Ferry's back (the table's
 * owner can drop or disable a trigger; the DDL guard watches only ALTER and DROP of the table
 * itself, and exists only for a superuser) means changes that were never logged, and a column
 * added or changed means a copy that no longer matches the table. Either way the migration must
 * stop rather than cut over.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ClientBase } from 'pg';
import { displayQualified } from '../core/identifiers';
import type { CopyTable } from '../core/plan';
import { CAPTURE_SCHEMA, FINGERPRINT_SQL, fingerprintSql, PARTITIONS_SQL, partitionsSql, readFreezeState, triggerNames } from './capture-sql';
import { FAILURE } from '../core/failure-types';
import { isLogical, logicalNames } from './logical-sql';
import { hasUniqueIndexOver } from './catalog';

/**
 * The triggers capture needs that are missing or not ENABLE ALWAYS, on the table and on each
 * of its partitions: the row trigger, the TRUNCATE refusal and, once armed, the freeze.
 */
function missingTriggersSql(relid: string, wanted: string): string {
  return `
SELECT tree.relid::regclass::text AS relation, want.name AS trigger, t.tgenabled::text AS enabled
  FROM (SELECT relid, level FROM pg_catalog.pg_partition_tree(${relid}::regclass) UNION SELECT ${relid}::regclass, 0) AS tree
 CROSS JOIN LATERAL unnest(${wanted}::text[]) AS want(name)
  LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = tree.relid AND t.tgname = want.name
 WHERE t.tgenabled IS DISTINCT FROM 'A'`;
}

const MISSING_TRIGGERS_SQL = `${missingTriggersSql('$1', '$2')}
 ORDER BY tree.level, 1, 2`;

/**
 * The tables of a group (`$2`, their indexes) whose capture any of the checks below would find
 * wanting: no registration, columns or partitions changed, a trigger of `$3` missing or not
 * ENABLE ALWAYS — all in one statement instead of several each.
 */
const GROUP_SUSPECTS_SQL = `
SELECT w.idx AS table_index
  FROM unnest($2::int[]) AS w(idx)
  LEFT JOIN ${CAPTURE_SCHEMA}.captures c ON c.migration_id = $1 AND c.table_index = w.idx
 WHERE c.relid IS NULL
    OR c.fingerprint IS DISTINCT FROM (${fingerprintSql('c.relid')})
    OR (to_jsonb(c) ->> 'partitions' IS NOT NULL AND to_jsonb(c) ->> 'partitions' IS DISTINCT FROM (${partitionsSql('c.relid')}))
    OR EXISTS (${missingTriggersSql('c.relid', '$3')})`;

/** With logical capture: the tables of a group left out of the publication, all of them without the slot. */
const GROUP_UNPUBLISHED_SQL = `
SELECT s.idx AS table_index
  FROM unnest($1::int[], $2::text[], $3::text[]) AS s(idx, nsp, rel)
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $4)
    OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables p WHERE p.pubname = $5 AND p.schemaname = s.nsp AND p.tablename = s.rel)`;

/** Logical capture: the slot must still exist and the publication still carry the table. */
async function assertLogicalIntact(source: ClientBase, migrationId: string, table: CopyTable): Promise<void> {
  const names = logicalNames(migrationId);
  const slot = await source.query('SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1', [names.slot]);
  if (slot.rowCount === 0) throw captureLost(table, `replication slot ${names.slot} was dropped`);
  const published = await source.query(
    'SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3',
    [names.publication, table.source.schema, table.source.name],
  );
  if (published.rowCount === 0) throw captureLost(table, `publication ${names.publication} no longer publishes it`);
}

const STATES: Record<string, string> = { D: 'disabled', O: 'enabled for origin sessions only', R: 'enabled for replica sessions only' };

function captureLost(table: CopyTable, what: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(
    `change capture of ${displayQualified(table.source)} was removed behind Ferry's back: ${what}; ` +
      'changes made since were not logged, so the target cannot be trusted — the migration stops without cutting over; start it again',
    FAILURE.CaptureLost,
  );
}

async function assertPartitionsUnchanged(source: ClientBase, table: CopyTable, registered: { relid: string; partitions: string | null }): Promise<void> {
  if (registered.partitions === null) return;
  const partitions = await source.query(PARTITIONS_SQL, [registered.relid]);
  if (partitions.rows[0].partitions !== registered.partitions) {
    throw ApplicationFailure.nonRetryable(
      `the partitions of ${displayQualified(table.source)} changed on the source during the online migration (now: ${partitions.rows[0].partitions || 'none'}); ` +
        'cancel, and start again once they are as they should stay',
      FAILURE.SchemaChanged,
    );
  }
}

/**
 * The triggers every captured table (and each of its partitions: they carry the TRUNCATE
 * refusal and the freeze of their own, and a clone of the row trigger) must have: the row
 * trigger unless capture is logical, the TRUNCATE refusal and, once armed, the freeze.
 */
async function wantedTriggers(source: ClientBase, migrationId: string): Promise<{ logical: boolean; triggers: string[] }> {
  const names = triggerNames(migrationId);
  const armed = (await readFreezeState(source, migrationId)) !== 'absent';
  const logical = await isLogical(source, migrationId);
  return { logical, triggers: [...(logical ? [] : [names.capture]), names.truncate, ...(armed ? [names.freeze] : [])] };
}

/**
 * The tables of a group whose capture assertCaptureIntact could find wanting, in a few
 * statements whatever the group's size (the cutover's drain checks hundreds of tables inside
 * the write outage): the same checks in set form. Each table returned must be checked on its
 * own (assertCaptureIntact), which throws what is wrong with it — or passes, when what the set
 * form saw was a partition added between two of its statements.
 */
export async function captureSuspects(source: ClientBase, migrationId: string, tables: CopyTable[]): Promise<CopyTable[]> {
  if (tables.length === 0) return [];
  const { logical, triggers } = await wantedTriggers(source, migrationId);
  const indexes = tables.map((t) => t.index);
  const suspects = new Set<number>((await source.query(GROUP_SUSPECTS_SQL, [migrationId, indexes, triggers])).rows.map((r) => r.table_index));
  if (logical) {
    const names = logicalNames(migrationId);
    const params = [indexes, tables.map((t) => t.source.schema), tables.map((t) => t.source.name), names.slot, names.publication];
    for (const r of (await source.query(GROUP_UNPUBLISHED_SQL, params)).rows) suspects.add(r.table_index);
  }
  return tables.filter((t) => suspects.has(t.index));
}

export async function assertCaptureIntact(source: ClientBase, input: { migrationId: string; table: CopyTable }): Promise<void> {
  const { table } = input;
  // partitions through to_jsonb: a captures table of an older Ferry has no such column.
  const { rows } = await source.query(
    `SELECT relid, fingerprint, to_jsonb(c) ->> 'partitions' AS partitions FROM ${CAPTURE_SCHEMA}.captures c WHERE migration_id = $1 AND table_index = $2`,
    [input.migrationId, table.index],
  );
  if (rows.length === 0) throw captureLost(table, 'its registration is gone from the source');
  const now = await source.query(FINGERPRINT_SQL, [rows[0].relid]);
  if (now.rows[0].fingerprint !== rows[0].fingerprint) {
    throw ApplicationFailure.nonRetryable(
      `${displayQualified(table.source)} was altered on the source during the online migration (columns now: ${now.rows[0].fingerprint}); ` +
        'the copy no longer matches it — cancel, apply the change to the target too, and start again',
      FAILURE.SchemaChanged,
    );
  }
  // A partition attached, detached or added since capture lacks (or keeps) the freeze and the
  // TRUNCATE refusal.
  await assertPartitionsUnchanged(source, table, rows[0]);
  const { logical, triggers } = await wantedTriggers(source, input.migrationId);
  if (logical) await assertLogicalIntact(source, input.migrationId, table);
  const missing = await source.query(MISSING_TRIGGERS_SQL, [rows[0].relid, triggers]);
  if (missing.rows.length > 0) {
    // A partition added between the check above and this query has no trigger of Ferry's yet:
    // that is the partitions' change, not a removed trigger (each statement reads its own snapshot).
    await assertPartitionsUnchanged(source, table, rows[0]);
    const { relation, trigger, enabled } = missing.rows[0];
    throw captureLost(table, `trigger ${trigger} on ${relation} ${enabled === null ? 'was dropped' : `is ${STATES[enabled] ?? `in state ${enabled}`}`}`);
  }
}

/**
 * The source still has a unique index over the table's key (in any column order): without it two
 * source rows could share a key, and the log, which holds keys, would fold them into one (a table
 * keyed by a unique index may lose it to a DROP INDEX). Checked before a slice applies anything,
 * not on an idle look at an empty log.
 */
export async function assertKeyIntact(source: ClientBase, table: CopyTable): Promise<void> {
  if (await hasUniqueIndexOver(source, table.source, table.keyColumns.map((k) => k.name))) return;
  throw ApplicationFailure.nonRetryable(
    `${displayQualified(table.source)} lost the unique index of its key (${table.keyColumns.map((k) => k.name).join(', ')}) on the source during the online migration; ` +
      'cancel, restore the key, and start again',
    FAILURE.SchemaChanged,
  );
}
