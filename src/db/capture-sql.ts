/**
 * SQL for online mode on the source: the change log (one queue table per migrated table), the
 * row triggers that fill it, the TRUNCATE refusal, the DDL guard, and the cutover freeze.
 * Names derive from a hash of the migration id, so concurrent migrations never collide and
 * every name fits PostgreSQL's 63-byte limit.
 */
import { createHash } from 'node:crypto';
import { ClientBase, escapeLiteral } from 'pg';
import { QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import { KeyColumn } from '../core/plan';
import { VersionedSchema } from './schema-versions';

/**
 * Capture on a source lives in a schema of its own, apart from the bookkeeping a target keeps in
 * `_ferry`: a database that is one migration's source and another's target (or both at once)
 * never loses one role's objects when the other's are removed.
 */
export const CAPTURE_SCHEMA = '_ferry_capture';
/** Ferry's own DDL on guarded tables (the freeze) sets this locally to pass the DDL guard. */
export const GUARD_BYPASS = "SET LOCAL ferry.ddl_guard = 'off'";
/** The freeze lives outside `_ferry`, so removing capture can never unfreeze the source. */
export const FREEZE_SCHEMA = '_ferry_freeze';

/** Key types whose text form depends on session settings: their trigger pins those settings. */
const SETTING_DEPENDENT = /^(date|time|timestamp|interval|real|double precision|float|bytea|money)/;

export function migrationTag(migrationId: string): string {
  return createHash('sha256').update(migrationId).digest('hex').slice(0, 12);
}

/** Per-table objects: the table's change log and its trigger function. */
export interface CaptureNames {
  log: QualifiedName;
  captureFunction: QualifiedName;
}

export function captureNames(migrationId: string, tableIndex: number): CaptureNames {
  const tag = migrationTag(migrationId);
  return {
    log: { schema: CAPTURE_SCHEMA, name: `log_${tag}_${tableIndex}` },
    captureFunction: { schema: CAPTURE_SCHEMA, name: `capture_${tag}_${tableIndex}` },
  };
}

/** A table's change log, quoted for a statement. */
export function quotedLog(migrationId: string, tableIndex: number): string {
  return quoteQualified(captureNames(migrationId, tableIndex).log);
}

/** Trigger names are per migration (each lives on its own table). */
export function triggerNames(migrationId: string): { capture: string; truncate: string; freeze: string; rowFreeze: string } {
  const tag = migrationTag(migrationId);
  return { capture: `ferry_capture_${tag}`, truncate: `ferry_no_truncate_${tag}`, freeze: `ferry_freeze_${tag}`, rowFreeze: `ferry_freeze_rows_${tag}` };
}

export function refuseTruncateFunction(migrationId: string): QualifiedName {
  return { schema: CAPTURE_SCHEMA, name: `refuse_truncate_${migrationTag(migrationId)}` };
}

export function guardFunction(migrationId: string): QualifiedName {
  return { schema: CAPTURE_SCHEMA, name: `guard_ddl_${migrationTag(migrationId)}` };
}

export function guardEventTriggers(migrationId: string): string[] {
  const tag = migrationTag(migrationId);
  return [`ferry_guard_${tag}`, `ferry_guard_drop_${tag}`];
}

/** The freeze of an older Ferry: a trigger created at cutover, raising unconditionally. */
export function freezeFunction(migrationId: string): QualifiedName {
  return { schema: FREEZE_SCHEMA, name: `frozen_${migrationTag(migrationId)}` };
}

/**
 * The armed freeze: its trigger is installed with capture and reads the migration's freeze
 * state from a sequence. A sequence because its value is not versioned: every statement sees
 * the current state, whatever its transaction's snapshot (a flag row would stay invisible to a
 * REPEATABLE READ transaction that began before the flip). Changing it needs no table lock.
 */
export function armedFreezeFunction(migrationId: string): QualifiedName {
  return { schema: FREEZE_SCHEMA, name: `freeze_${migrationTag(migrationId)}` };
}

export function freezeStateSequence(migrationId: string): QualifiedName {
  return { schema: FREEZE_SCHEMA, name: `freeze_state_${migrationTag(migrationId)}` };
}

/** Values of the freeze state sequence. */
export const FREEZE_STATE = {
  /** Writes pass (capture installed, cutover not begun, or rolled back). */
  open: 0,
  /** Writes refused: the cutover is draining the last changes. */
  frozen: 1,
  /** Writes pass again after the cutover (`afterwards: unfreeze`, `ferry unfreeze`). */
  released: 2,
  /** Writes refused for good: the tables moved (`afterwards: keep-frozen`). */
  moved: 3,
} as const;
export type FreezeState = keyof typeof FREEZE_STATE;

/**
 * The freeze state on the source, in one statement: `absent` where the freeze is not armed
 * (capture never installed, installed by a Ferry without the armed freeze, or removed). A
 * sequence never set since it was created reads open.
 */
export async function readFreezeState(db: ClientBase, migrationId: string): Promise<FreezeState | 'absent'> {
  const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS armed, pg_catalog.pg_sequence_last_value(to_regclass($1)) AS state', [
    quoteQualified(freezeStateSequence(migrationId)),
  ]);
  if (!rows[0].armed) return 'absent';
  if (rows[0].state === null) return 'open';
  const value = Number(rows[0].state);
  const state = (Object.keys(FREEZE_STATE) as FreezeState[]).find((name) => FREEZE_STATE[name] === value);
  if (!state) throw new Error(`the freeze state sequence of migration ${migrationId} holds ${value}, which no Ferry writes`);
  return state;
}

/** The capture bookkeeping's numbered versions (see schema-versions.ts); steps are only appended. */
export const CAPTURE_BOOKKEEPING: VersionedSchema = {
  schema: CAPTURE_SCHEMA,
  steps: [
    {
      version: 1,
      name: 'captures',
      sql: `
CREATE TABLE ${CAPTURE_SCHEMA}.captures (
  migration_id text NOT NULL,
  table_index  int  NOT NULL,
  relid        oid  NOT NULL,
  fingerprint  text NOT NULL,
  ddl_guard    boolean NOT NULL,
  -- the table's partitions (PARTITIONS_SQL) when the capture was installed
  partitions   text,
  PRIMARY KEY (migration_id, table_index)
)`,
    },
    {
      version: 2,
      name: 'logical capture',
      sql: `
CREATE TABLE ${CAPTURE_SCHEMA}.slots (
  migration_id  text PRIMARY KEY,
  slot          text NOT NULL,
  publication   text NOT NULL,
  -- the position up to which every change is in the logs, written with those log rows
  confirmed_lsn pg_lsn,
  confirmed_at  timestamptz
)`,
    },
    {
      version: 3,
      name: 'marks in the stream before PostgreSQL 14',
      // pgoutput streams logical messages from 14 on: an older source's marks are rows here,
      // in each logical migration's publication (src/db/logical-sql.ts, emitMark).
      sql: `
CREATE TABLE ${CAPTURE_SCHEMA}.marks (
  id      bigserial PRIMARY KEY,
  prefix  text NOT NULL,
  content text NOT NULL
)`,
    },
    {
      version: 4,
      name: 'capture installed in parts',
      // A table's row is written with its triggers, in a transaction of its own; the last part
      // (the last table, the guard, the publication) marks every row complete. A Ferry that
      // knows only version 3 refuses this schema rather than take a partial install for done.
      sql: `ALTER TABLE ${CAPTURE_SCHEMA}.captures ADD COLUMN complete boolean NOT NULL DEFAULT true`,
    },
  ],
};

/**
 * The queue of changed keys: consumed by id (read, apply, delete exactly those ids). A table
 * without a key (logical capture only) has a log of row images instead (createOpsLogSql).
 */
export function createLogSql(names: CaptureNames, keyless = false): string {
  if (keyless) return createOpsLogSql(names);
  return `CREATE TABLE ${quoteQualified(names.log)} (
  id        bigserial PRIMARY KEY,
  pk        text[] NOT NULL,
  logged_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`;
}

/**
 * The log of a table without a key (src/db/keyless-ops.ts): each change as whole rows, one row
 * taken away (delta −1, the old image) or added (+1, the new one), at the position of its
 * transaction's commit and its place in it. (lsn, seq) names a change for good: the consumer
 * writes a change it receives again once only, and the apply's watermark on the target says
 * which were applied. `id` and `logged_at` as in every log (the lag readings).
 */
function createOpsLogSql(names: CaptureNames): string {
  return `CREATE TABLE ${quoteQualified(names.log)} (
  id        bigserial PRIMARY KEY,
  lsn       pg_lsn   NOT NULL,
  seq       int      NOT NULL,
  delta     smallint NOT NULL CHECK (delta IN (-1, 1)),
  image     jsonb    NOT NULL,
  logged_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (lsn, seq)
)`;
}

function keyArray(record: 'NEW' | 'OLD', keys: KeyColumn[]): string {
  return `ARRAY[${keys.map((k) => `${record}.${quoteIdent(k.name)}::text`).join(', ')}]`;
}

/**
 * The row trigger: NEW key on insert and update, OLD key on delete and on an update that
 * changes the key. Keys whose text depends on session settings are written under Ferry's
 * pinned settings, so the sync reads back exactly the key that was logged.
 */
export function createCaptureFunctionSql(names: CaptureNames, keys: KeyColumn[]): string {
  const log = quoteQualified(names.log);
  // Built per record, not by rewriting NEW. to OLD.: a column may be named "xNEW.y".
  const key = (record: 'NEW' | 'OLD') =>
    keys.length === 1 ? `${record}.${quoteIdent(keys[0].name)}` : `(${keys.map((k) => `${record}.${quoteIdent(k.name)}`).join(', ')})`;
  const keyExpr = key('NEW');
  const oldExpr = key('OLD');
  const pinned = keys.some((k) => SETTING_DEPENDENT.test(k.type))
    ? `\nSET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres' SET TimeZone = 'UTC' SET extra_float_digits = 3 SET bytea_output = 'hex'`
    : '';
  const body = `
BEGIN
  IF TG_OP <> 'DELETE' THEN
    INSERT INTO ${log} (pk) VALUES (${keyArray('NEW', keys)});
  END IF;
  IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND ${oldExpr} IS DISTINCT FROM ${keyExpr}) THEN
    INSERT INTO ${log} (pk) VALUES (${keyArray('OLD', keys)});
  END IF;
  RETURN NULL;
END
`;
  return `CREATE OR REPLACE FUNCTION ${quoteQualified(names.captureFunction)}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = ''${pinned} AS ${dollarQuoted(body)}`;
}

/**
 * The body between dollar quotes whose tag it does not contain: a key column may be named
 * `id$ferry$…` (a valid identifier, even unquoted), and a fixed tag would end the body there and
 * run the rest of the name as SQL.
 */
export function dollarQuoted(body: string): string {
  let tag = '$ferry$';
  for (let i = 1; `${body}${tag}`.indexOf(tag) !== body.length; i += 1) tag = `$ferry${i}$`;
  return `${tag}${body}${tag}`;
}

export function createRefuseTruncateSql(migrationId: string): string {
  return `CREATE OR REPLACE FUNCTION ${quoteQualified(refuseTruncateFunction(migrationId))}() RETURNS trigger
LANGUAGE plpgsql AS $ferry$
BEGIN
  RAISE EXCEPTION 'TRUNCATE of %.% is refused: Ferry migration % is copying this table online', TG_TABLE_SCHEMA, TG_TABLE_NAME, ${escapeLiteral(migrationId)}
    USING ERRCODE = 'object_in_use', HINT = 'delete rows with DELETE, or cancel the migration first';
END
$ferry$`;
}

/**
 * The capture trigger (AFTER ROW, ENABLE ALWAYS) on a migrated table. On a partitioned table
 * PostgreSQL clones it onto every partition, present and future, so rows written straight into
 * a partition are captured too. Here and below, `relation` is regclass text — qualified and
 * quoted in Ferry's sessions, whose search_path is empty — as relationTree finds partitions.
 */
export function createCaptureTriggerSql(relation: string, names: CaptureNames, migrationId: string): string[] {
  const trigger = quoteIdent(triggerNames(migrationId).capture);
  return [
    `CREATE TRIGGER ${trigger} AFTER INSERT OR UPDATE OR DELETE ON ${relation}
       FOR EACH ROW EXECUTE FUNCTION ${quoteQualified(names.captureFunction)}()`,
    `ALTER TABLE ${relation} ENABLE ALWAYS TRIGGER ${trigger}`,
  ];
}

/**
 * The TRUNCATE refusal (BEFORE TRUNCATE, ENABLE ALWAYS). A statement trigger fires only for
 * statements that name its own table, and is never cloned: it goes on the migrated table and
 * on each of its partitions.
 */
export function createRefuseTruncateTriggerSql(relation: string, migrationId: string): string[] {
  const trigger = quoteIdent(triggerNames(migrationId).truncate);
  return [
    `CREATE TRIGGER ${trigger} BEFORE TRUNCATE ON ${relation}
       FOR EACH STATEMENT EXECUTE FUNCTION ${quoteQualified(refuseTruncateFunction(migrationId))}()`,
    `ALTER TABLE ${relation} ENABLE ALWAYS TRIGGER ${trigger}`,
  ];
}

/**
 * The DDL guard: an event trigger that refuses ALTER or DROP of a migrated table or of any of
 * its partitions (ATTACH and DETACH PARTITION are ALTER TABLE of the partitioned table), and
 * CREATE TABLE … PARTITION OF one of them — such a partition would lack the freeze and the
 * TRUNCATE refusal — while the migration runs. `relids`: the tables and all their partitions.
 * Creating event triggers needs superuser; without it Ferry compares each table's column
 * fingerprint and partitions instead (FINGERPRINT_SQL, PARTITIONS_SQL) and fails the migration
 * clearly.
 */
export function createGuardSql(migrationId: string, relids: number[]): string[] {
  const fn = quoteQualified(guardFunction(migrationId));
  const [alterTrigger, dropTrigger] = guardEventTriggers(migrationId);
  const oids = `ARRAY[${relids.join(', ')}]::oid[]`;
  return [
    `CREATE OR REPLACE FUNCTION ${fn}() RETURNS event_trigger LANGUAGE plpgsql AS $ferry$
DECLARE
  hit record;
BEGIN
  IF current_setting('ferry.ddl_guard', true) = 'off' THEN
    RETURN;
  END IF;
  IF TG_EVENT = 'sql_drop' THEN
    SELECT * INTO hit FROM pg_catalog.pg_event_trigger_dropped_objects()
     WHERE classid = 'pg_catalog.pg_class'::regclass AND objid = ANY (${oids}) AND objsubid = 0 LIMIT 1;
  ELSE
    SELECT c.object_identity, (pg_catalog.pg_identify_object('pg_catalog.pg_class'::regclass, i.inhparent, 0)).identity AS parent INTO hit
      FROM pg_catalog.pg_event_trigger_ddl_commands() c JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.objid
     WHERE c.classid = 'pg_catalog.pg_class'::regclass AND c.command_tag = 'CREATE TABLE' AND i.inhparent = ANY (${oids}) LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION 'CREATE TABLE % PARTITION OF % is refused: Ferry migration % is copying this table online', hit.object_identity, hit.parent, ${escapeLiteral(migrationId)}
        USING ERRCODE = 'object_in_use', HINT = 'add the partition after the cutover, or cancel the migration first';
    END IF;
    SELECT * INTO hit FROM pg_catalog.pg_event_trigger_ddl_commands()
     WHERE classid = 'pg_catalog.pg_class'::regclass AND objid = ANY (${oids}) AND command_tag = 'ALTER TABLE' LIMIT 1;
  END IF;
  IF FOUND THEN
    RAISE EXCEPTION '% of % is refused: Ferry migration % is copying this table online', TG_TAG, hit.object_identity, ${escapeLiteral(migrationId)}
      USING ERRCODE = 'object_in_use', HINT = 'change the table after the cutover, or cancel the migration first';
  END IF;
END
$ferry$`,
    `CREATE EVENT TRIGGER ${quoteIdent(alterTrigger)} ON ddl_command_end EXECUTE FUNCTION ${fn}()`,
    `CREATE EVENT TRIGGER ${quoteIdent(dropTrigger)} ON sql_drop EXECUTE FUNCTION ${fn}()`,
  ];
}

/**
 * Columns, types, NOT NULL and defaults of a table as one comparable string; `relid` is an SQL
 * expression (a parameter, or a column of an outer query).
 */
export function fingerprintSql(relid: string): string {
  return `
SELECT coalesce(string_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) ||
         CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY a.attnum), '') AS fingerprint
  FROM pg_catalog.pg_attribute a
 WHERE a.attrelid = ${relid} AND a.attnum > 0 AND NOT a.attisdropped`;
}

export const FINGERPRINT_SQL = fingerprintSql('$1');

/**
 * A table's partitions with their bounds, as one comparable string ('' when it has none). A
 * partition that DETACH … CONCURRENTLY left half-detached (its first step commits before any
 * event trigger can refuse it) is no longer listed by pg_partition_tree, so it shows as gone.
 */
export function partitionsSql(relid: string): string {
  return `
SELECT coalesce(string_agg(c.oid::regclass::text || ' ' || pg_catalog.pg_get_expr(c.relpartbound, c.oid), ', ' ORDER BY c.oid), '') AS partitions
  FROM pg_catalog.pg_partition_tree(${relid}::regclass) t
  JOIN pg_catalog.pg_class c ON c.oid = t.relid
 WHERE t.level > 0`;
}

export const PARTITIONS_SQL = partitionsSql('$1');

export function createFreezeStateSql(migrationId: string): string {
  return `CREATE SEQUENCE IF NOT EXISTS ${quoteQualified(freezeStateSequence(migrationId))} MINVALUE 0 MAXVALUE 9 START WITH 0 NO CYCLE`;
}

/**
 * Trigger function of the armed freeze: refuses writes while the state says so. A statement
 * trigger on every migrated relation; a row trigger too where writes fire no statement trigger of
 * the table (ROW_FREEZE_SQL), which must hand the row on when the source is open.
 */
export function createArmedFreezeFunctionSql(migrationId: string): string {
  const id = escapeLiteral(migrationId);
  return `CREATE OR REPLACE FUNCTION ${quoteQualified(armedFreezeFunction(migrationId))}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = '' AS $ferry$
DECLARE
  state int8 := (SELECT last_value FROM ${quoteQualified(freezeStateSequence(migrationId))});
BEGIN
  IF state = ${FREEZE_STATE.frozen} THEN
    RAISE EXCEPTION 'table %.% is frozen: Ferry migration % is cutting it over to its new database', TG_TABLE_SCHEMA, TG_TABLE_NAME, ${id}
      USING ERRCODE = 'read_only_sql_transaction', HINT = 'retry after the cutover; if it completes, write to the new database';
  ELSIF state = ${FREEZE_STATE.moved} THEN
    RAISE EXCEPTION 'table %.% is frozen: Ferry migration % moved it to its new database; write there', TG_TABLE_SCHEMA, TG_TABLE_NAME, ${id}
      USING ERRCODE = 'read_only_sql_transaction', HINT = 'ferry unfreeze ' || ${id} || ' lifts the freeze';
  END IF;
  IF TG_LEVEL = 'ROW' THEN
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
  END IF;
  RETURN NULL;
END
$ferry$`;
}

/**
 * Whether a table's writes can bypass its statement triggers, so that the freeze must act row by
 * row: writes made through a legacy inheritance parent fire the parent's statement triggers only,
 * and a subscription's apply worker fires no statement triggers at all.
 */
export const ROW_FREEZE_SQL = `
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
                WHERE i.inhrelid = $1::oid AND p.relkind = 'r')
    OR EXISTS (SELECT 1 FROM pg_catalog.pg_subscription_rel r
                WHERE r.srrelid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::oid::regclass) UNION SELECT $1::oid)) AS needed`;

/** The armed freeze as a row trigger on one table (not a partitioned one: on each of its partitions). */
export function createRowFreezeTriggerSql(relation: string, migrationId: string): string[] {
  const trigger = quoteIdent(triggerNames(migrationId).rowFreeze);
  return [
    `CREATE TRIGGER ${trigger} BEFORE INSERT OR UPDATE OR DELETE ON ${relation}
       FOR EACH ROW EXECUTE FUNCTION ${quoteQualified(armedFreezeFunction(migrationId))}()`,
    `ALTER TABLE ${relation} ENABLE ALWAYS TRIGGER ${trigger}`,
  ];
}

/** The armed freeze on one relation: a statement trigger, so on each partition too, as the TRUNCATE refusal. */
export function createArmedFreezeTriggerSql(relation: string, migrationId: string): string[] {
  const trigger = quoteIdent(triggerNames(migrationId).freeze);
  return [
    `CREATE TRIGGER ${trigger} BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${relation}
       FOR EACH STATEMENT EXECUTE FUNCTION ${quoteQualified(armedFreezeFunction(migrationId))}()`,
    `ALTER TABLE ${relation} ENABLE ALWAYS TRIGGER ${trigger}`,
  ];
}

/**
 * A capture function that logs nothing: replacing a function's body takes no lock on the
 * tables whose triggers call it, so capture stops costing the application at once, even while
 * a long reader keeps the triggers themselves from being dropped.
 */
export function neutralCaptureFunctionSql(names: CaptureNames): string {
  return `CREATE OR REPLACE FUNCTION ${quoteQualified(names.captureFunction)}() RETURNS trigger
LANGUAGE plpgsql SET search_path = '' AS $ferry$ BEGIN RETURN NULL; END $ferry$`;
}

/** The TRUNCATE refusal, likewise made harmless without a lock once the cutover is past. */
export function neutralRefuseTruncateSql(migrationId: string): string {
  return `CREATE OR REPLACE FUNCTION ${quoteQualified(refuseTruncateFunction(migrationId))}() RETURNS trigger
LANGUAGE plpgsql AS $ferry$ BEGIN RETURN NULL; END $ferry$`;
}

export function createFreezeFunctionSql(migrationId: string): string {
  return `CREATE OR REPLACE FUNCTION ${quoteQualified(freezeFunction(migrationId))}() RETURNS trigger
LANGUAGE plpgsql AS $ferry$
BEGIN
  RAISE EXCEPTION 'table %.% is frozen: Ferry migration % moved it to its new database; write there', TG_TABLE_SCHEMA, TG_TABLE_NAME, ${escapeLiteral(migrationId)}
    USING ERRCODE = 'read_only_sql_transaction', HINT = 'ferry unfreeze ' || ${escapeLiteral(migrationId)} || ' lifts the freeze';
END
$ferry$`;
}

export function createFreezeTriggerSql(relation: string, migrationId: string): string[] {
  const trigger = quoteIdent(triggerNames(migrationId).freeze);
  return [
    `CREATE TRIGGER ${trigger} BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${relation}
       FOR EACH STATEMENT EXECUTE FUNCTION ${quoteQualified(freezeFunction(migrationId))}()`,
    `ALTER TABLE ${relation} ENABLE ALWAYS TRIGGER ${trigger}`,
  ];
}
