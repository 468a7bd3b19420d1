/**
 * Logical capture on the source (docs/architecture.md §6): per migration a publication of its
 * tables and a logical replication slot (pgoutput); the consumer turns the stream into keys in
 * the same change logs the triggers would fill. Names derive from the migration id, as capture's.
 */
import { ClientBase } from 'pg';
import { QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import { CAPTURE_SCHEMA, migrationTag } from './capture-sql';

export interface LogicalNames {
  slot: string;
  publication: string;
  /** Prefix of the logical messages that mark positions in the stream (heartbeats, cutover marks). */
  messagePrefix: string;
}

export function logicalNames(migrationId: string): LogicalNames {
  const tag = migrationTag(migrationId);
  return { slot: `ferry_slot_${tag}`, publication: `ferry_pub_${tag}`, messagePrefix: `ferry:${tag}` };
}

export const SLOTS_TABLE = `${CAPTURE_SCHEMA}.slots`;

/**
 * Where a source older than PostgreSQL 14 puts its marks: its pgoutput has no `messages` option
 * (it refuses one: "unrecognized pgoutput option: messages"), so a mark is a row inserted here,
 * a table in the migration's publication, and the consumer reads its insert as the message.
 */
export const MARKS_TABLE = { schema: CAPTURE_SCHEMA, name: 'marks' } as const;

/** The first PostgreSQL (server_version_num) whose pgoutput streams logical messages. */
const MESSAGES_SINCE = 140000;

/** Whether the server's pgoutput streams logical messages (PostgreSQL 14 and later). */
export async function streamsMessages(db: ClientBase): Promise<boolean> {
  const { rows } = await db.query(`SELECT pg_catalog.current_setting('server_version_num')::int >= $1 AS messages`, [MESSAGES_SINCE]);
  return rows[0].messages;
}

/**
 * The migration's publication. No TRUNCATE: capture refuses it on the migrated tables anyway. With
 * a partitioned table among them (`viaRoot`), changes are published as the root's
 * (publish_via_partition_root, PostgreSQL 13), so the consumer sees the table it moves, a row
 * moved between partitions as a delete and an insert.
 */
export function createPublicationSql(names: LogicalNames, tables: QualifiedName[], viaRoot = false, withMarks = false): string {
  const options = `publish = 'insert, update, delete'${viaRoot ? ', publish_via_partition_root = true' : ''}`;
  const published = withMarks ? [...tables, MARKS_TABLE] : tables;
  return `CREATE PUBLICATION ${quoteIdent(names.publication)} FOR TABLE ${published.map(quoteQualified).join(', ')} WITH (${options})`;
}

/** Whether the migration captures logically (its slot is registered). */
export async function isLogical(db: ClientBase, migrationId: string): Promise<boolean> {
  const { rows } = await db.query(`SELECT to_regclass('${SLOTS_TABLE}') IS NOT NULL AS present`);
  if (!rows[0].present) return false;
  return ((await db.query(`SELECT 1 FROM ${SLOTS_TABLE} WHERE migration_id = $1`, [migrationId])).rowCount ?? 0) > 0;
}

/**
 * Creates the slot unless a consistent one exists. Outside any transaction that wrote
 * (PostgreSQL refuses that), and it waits for the transactions running now to end: its
 * consistent point is where the stream begins, before the first row is copied.
 *
 * A slot still being created is listed already, without a confirmed position, held by the
 * session creating it — an earlier attempt's, whose worker may be gone while its session waits
 * on. Taking that slot for a ready one would let the copy begin before its consistent point
 * (changes in between in neither); so its creation is ended (the half-made slot goes with the
 * session) and the slot created again here.
 */
export async function ensureSlot(db: ClientBase, names: LogicalNames): Promise<void> {
  for (let attempt = 0; ; attempt += 1) {
    const { rows } = await db.query(
      'SELECT active_pid, confirmed_flush_lsn IS NOT NULL AS consistent FROM pg_catalog.pg_replication_slots WHERE slot_name = $1',
      [names.slot],
    );
    if (rows.length > 0 && rows[0].consistent) return;
    if (rows.length === 0) {
      try {
        await db.query(`SELECT pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')`, [names.slot]);
        return;
      } catch (err) {
        // 42710: another attempt created it in between; look again.
        if ((err as { code?: string }).code !== '42710' || attempt >= 50) throw err;
      }
    } else if (rows[0].active_pid !== null) {
      await db.query('SELECT pg_catalog.pg_terminate_backend($1)', [rows[0].active_pid]);
    } else {
      throw new Error(`replication slot ${names.slot} exists but has no consistent point and nobody is creating it: drop it (pg_drop_replication_slot) and retry`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Emits a mark and returns its position: once the consumer confirmed past it, every change
 * committed before it is in the logs. A logical message; before PostgreSQL 14 a row of
 * MARKS_TABLE (its insert committed at once, the migration's earlier marks deleted after it;
 * the position is taken before its commit, which the consumer confirms past).
 */
export async function emitMark(db: ClientBase, names: LogicalNames, content: string, messages?: boolean): Promise<string> {
  // `messages`: what the caller already knows of the server (streamsMessages), else asked here.
  if (messages ?? (await streamsMessages(db))) {
    const { rows } = await db.query('SELECT pg_catalog.pg_logical_emit_message(false, $1, $2)::text AS lsn', [names.messagePrefix, content]);
    return rows[0].lsn;
  }
  const marks = quoteQualified(MARKS_TABLE);
  const { rows } = await db.query(`INSERT INTO ${marks} (prefix, content) VALUES ($1, $2) RETURNING id, pg_catalog.pg_current_wal_insert_lsn()::text AS lsn`, [
    names.messagePrefix,
    content,
  ]);
  await db.query(`DELETE FROM ${marks} WHERE prefix = $1 AND id < $2`, [names.messagePrefix, rows[0].id]);
  return rows[0].lsn;
}

/**
 * Emits a mark and waits until the consumer confirmed past it: every change committed before
 * the call is in the change logs then. Fails (retryably) after timeoutMs.
 */
export async function awaitConfirmed(db: ClientBase, migrationId: string, timeoutMs: number, heartbeat: () => void): Promise<{ lsn: string }> {
  const lsn = await emitMark(db, logicalNames(migrationId), 'mark');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await db.query(`SELECT coalesce(confirmed_lsn >= $2::pg_lsn, false) AS past FROM ${SLOTS_TABLE} WHERE migration_id = $1`, [migrationId, lsn]);
    if (rows.length === 0) throw new Error(`logical capture of migration ${migrationId} is not registered on the source`);
    if (rows[0].past) return { lsn };
    if (Date.now() >= deadline) throw new Error(`the capture consumer has not confirmed position ${lsn} within ${Math.round(timeoutMs / 1000)}s`);
    heartbeat();
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Drops the slot (ending the WAL sender that holds it, a consumer presumed dead included) and
 * the publication. Found by name, so it works without bookkeeping too (`ferry cleanup`).
 */
export async function dropLogical(db: ClientBase, names: LogicalNames): Promise<void> {
  for (let attempt = 0; ; attempt += 1) {
    const { rows } = await db.query('SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = $1', [names.slot]);
    if (rows.length === 0) break;
    if (rows[0].active_pid === null) {
      try {
        await db.query('SELECT pg_catalog.pg_drop_replication_slot($1)', [names.slot]);
        break;
      } catch (err) {
        // 55006: a consumer took it again in between; 42704: someone else dropped it.
        const code = (err as { code?: string }).code;
        if (code === '42704') break;
        if (code !== '55006' || attempt >= 50) throw err;
      }
    } else {
      await db.query('SELECT pg_catalog.pg_terminate_backend($1)', [rows[0].active_pid]);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await db.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(names.publication)}`);
}

/**
 * Bytes of WAL the slot holds, and what max_slot_wal_keep_size still allows (null: unlimited).
 * PostgreSQL 12 has neither the setting nor the column: read by name, it is null there.
 */
export const SLOT_LAG_SQL = `
SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.confirmed_flush_lsn)::float8 AS bytes,
       (pg_catalog.to_jsonb(s) ->> 'safe_wal_size')::float8 AS safe
  FROM pg_catalog.pg_replication_slots s
 WHERE s.slot_name = $1`;
