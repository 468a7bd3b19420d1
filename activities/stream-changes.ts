/**
 * Logical capture's consumer (docs/architecture.md §6): streams the migration's slot (pgoutput,
 * through pg-logical-replication) and turns every change into the key(s) to re-sync — the new
 * key on insert and update, the old key on delete and on a key change — written into the same
 * change logs the triggers fill, so the sync, the validation, the dirty set and the drain work
 * unchanged. Nothing runs on the application's write path.
 *
 * Exactly-once is not needed, no-loss is: keys and the position they reach commit in one source
 * transaction (`_ferry_capture.slots.confirmed_lsn`), and only then is that position confirmed
 * to the slot. A consumer killed anywhere resumes from the slot's confirmed position; what it
 * queues again is re-applied, which is harmless. Idle sources still move the slot: a logical
 * message every few seconds is a position the consumer confirms.
 *
 * streamChanges runs for a slice (minutes), heartbeating; the workflow calls it again until the
 * cutover's drain is done.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { LogicalReplicationService, Pgoutput, PgoutputPlugin } from 'pg-logical-replication';
import { ClientBase, PoolClient } from 'pg';
import { inTransaction } from '../src/db/connections';
import { captureNames } from '../src/db/capture-sql';
import { sqlState } from '../src/db/errors';
import { awaitConfirmed, emitMark, logicalNames, SLOT_LAG_SQL, SLOTS_TABLE } from '../src/db/logical-sql';
import { sessionConfig } from '../src/db/session';
import { quoteQualified } from '../src/core/identifiers';
import { Key } from '../src/core/plan';
import { FAILURE } from '../src/core/failure-types';
import { CaptureTable } from './capture';
import { ActivityDeps } from './deps';
import { enqueue } from './sync-changes';

export interface StreamInput {
  migrationId: string;
  source: string;
  tables: CaptureTable[];
  sliceMs: number;
}

export interface StreamResult {
  /** The position up to which every change is in the change logs. */
  confirmedLsn: string | null;
  keys: number;
}

export interface SlotLag {
  /** WAL the slot holds on the source. */
  slotLagBytes: number;
  /**
   * How long a change takes from its commit to the change logs: the last heartbeat message's
   * round trip through the slot (or, while one is still on its way, how long it has been).
   */
  slotLagSeconds: number;
  /** WAL the slot may still hold before max_slot_wal_keep_size invalidates it; null when unlimited. */
  safeWalBytes: number | null;
}

/** The WAL the slot holds now; null without a slot. */
async function readSlotWal(db: ClientBase, slot: string): Promise<Omit<SlotLag, 'slotLagSeconds'> | null> {
  const { rows } = await db.query(SLOT_LAG_SQL, [slot]);
  if (rows.length === 0) return null;
  return {
    slotLagBytes: Math.max(0, Math.round(Number(rows[0].bytes ?? 0))),
    safeWalBytes: rows[0].safe === null ? null : Math.round(Number(rows[0].safe)),
  };
}

/** How often the queued keys are committed and their position confirmed. */
const FLUSH_MS = 200;
/** Keys held before a flush, whatever the time. */
const FLUSH_KEYS = 5_000;
/** A logical message this often, so an idle source still moves the slot. */
const IDLE_MARK_MS = 5_000;

/**
 * pgoutput's text values as they come: the key must be PostgreSQL's own text of it (the change
 * logs hold keys as text, cast back by the sync), never a JavaScript parse of it.
 */
class RawPgoutputPlugin extends PgoutputPlugin {
  parse(buffer: Buffer): Pgoutput.Message {
    const message = super.parse(buffer);
    if (message.tag === 'relation') for (const column of message.columns) column.parser = (raw: unknown) => raw;
    return message;
  }
}

function relationKey(schema: string, name: string): string {
  return JSON.stringify([schema, name]);
}

/** The keys one change asks to re-sync. */
export function changedKeys(message: Pgoutput.Message, keyColumns: string[]): Key[] {
  const keyOf = (tuple: Record<string, unknown> | null) => {
    if (!tuple) return null;
    return keyColumns.map((k) => {
      const value = tuple[k];
      // A key value pgoutput left out (an unchanged TOASTed value): the key to re-sync is unknown.
      if (typeof value !== 'string') {
        throw ApplicationFailure.nonRetryable(`a change arrived without the value of key column "${k}" (${value === null ? 'null' : 'not sent'}); logical capture cannot tell which row changed`, FAILURE.CaptureLost);
      }
      return value;
    });
  };
  const keys: (Key | null)[] = [];
  if (message.tag === 'insert') keys.push(keyOf(message.new));
  // The old key comes only when the key changed (replica identity default) or always (full).
  if (message.tag === 'update') keys.push(keyOf(message.new), keyOf(message.key ?? message.old));
  if (message.tag === 'delete') keys.push(keyOf(message.key ?? message.old));
  const distinct = new Map<string, Key>();
  for (const key of keys) if (key) distinct.set(JSON.stringify(key), key);
  return [...distinct.values()];
}

export function createStreamActivities({ connections, logger, metrics }: ActivityDeps) {
  async function streamChanges(input: StreamInput): Promise<StreamResult> {
    const ctx = Context.current();
    const names = logicalNames(input.migrationId);
    const tables = new Map(input.tables.map((t) => [relationKey(t.source.schema, t.source.name), t]));
    return await connections.withClient(input.source, async (db) => {
      await takeSlot(db, names.slot);
      const service = new LogicalReplicationService(sessionConfig(connections.url(input.source), 'ferry-capture', { statementTimeoutMs: 0, lockTimeoutMs: 5_000 }), {
        acknowledge: { auto: false, timeoutSeconds: 0 },
        flowControl: { enabled: true },
      });
      const plugin = new RawPgoutputPlugin({ protoVersion: 1, publicationNames: [names.publication], messages: true });

      // Keys of the transaction being received; keys of committed ones waiting for the flush.
      let current = new Map<number, Map<string, Key>>();
      let pending = new Map<number, Map<string, Key>>();
      let pendingKeys = 0;
      let pendingLsn: string | null = null;
      let confirmedLsn: string | null = null;
      let queued = 0;
      let lastFlush = Date.now();
      let failure: unknown;

      // Everything that touches `db` or the stream's state runs one after the other, and nothing
      // more after a failure: a later flush would confirm a position past keys that were lost
      // with the failed one (the retry resumes from the slot instead).
      let chain: Promise<void> = Promise.resolve();
      const serial = (step: () => Promise<void>) => {
        chain = chain
          .then(() => (failure === undefined ? step() : undefined))
          .catch((err: unknown) => {
            failure ??= err;
          });
        return chain;
      };
      const flush = async () => {
        if (pendingLsn === null) return;
        const lsn = pendingLsn;
        const batches = pending;
        pending = new Map();
        pendingKeys = 0;
        pendingLsn = null;
        await inTransaction(db, async () => {
          for (const [index, keys] of batches) {
            await enqueue(db, quoteQualified(captureNames(input.migrationId, index).log), [...keys.values()]);
            queued += keys.size;
          }
          await db.query(`UPDATE ${SLOTS_TABLE} SET confirmed_lsn = $2::pg_lsn, confirmed_at = clock_timestamp() WHERE migration_id = $1`, [input.migrationId, lsn]);
        });
        // Only now: the slot may let go of what the logs hold.
        await service.acknowledge(lsn);
        confirmedLsn = lsn;
        lastFlush = Date.now();
      };
      const onMessage = async (message: Pgoutput.Message) => {
        switch (message.tag) {
          case 'begin':
            current = new Map();
            return;
          case 'insert':
          case 'update':
          case 'delete': {
            const table = tables.get(relationKey(message.relation.schema, message.relation.name));
            if (!table) return;
            let keys = current.get(table.index);
            if (!keys) current.set(table.index, (keys = new Map()));
            for (const key of changedKeys(message, table.keyColumns.map((k) => k.name))) keys.set(JSON.stringify(key), key);
            return;
          }
          case 'commit':
            for (const [index, keys] of current) {
              let into = pending.get(index);
              if (!into) pending.set(index, (into = new Map()));
              for (const [text, key] of keys) into.set(text, key);
              pendingKeys += keys.size;
            }
            current = new Map();
            pendingLsn = message.commitEndLsn;
            if (pendingKeys >= FLUSH_KEYS) await flush();
            return;
          case 'message': {
            // A mark or heartbeat: confirmed at once, since someone may be waiting for it.
            if (message.prefix !== names.messagePrefix) return;
            pendingLsn = message.messageLsn;
            await flush();
            const sentAt = heartbeatsSent.get(Buffer.from(message.content).toString());
            if (sentAt !== undefined) {
              roundTripMs = Date.now() - sentAt;
              heartbeatsSent.clear();
            }
            return;
          }
          default:
        }
      };
      service.on('data', (_lsn: string, message: Pgoutput.Message) => serial(() => onMessage(message)));
      service.on('error', (err: unknown) => {
        failure ??= err;
      });

      const started = Date.now();
      const streaming = service.subscribe(plugin, names.slot).then(
        () => {
          if (Date.now() - started < input.sliceMs && !ctx.cancellationSignal.aborted) failure ??= new Error('the replication stream ended');
        },
        (err: unknown) => {
          failure ??= err;
        },
      );
      let lastMark = 0;
      let lag: SlotLag | undefined;
      // Heartbeats on their way through the slot (content → when sent), and the last round trip.
      const heartbeatsSent = new Map<string, number>();
      let roundTripMs = 0;
      let sent = 0;
      try {
        while (Date.now() - started < input.sliceMs && !ctx.cancellationSignal.aborted && failure === undefined) {
          await ctx.sleep(FLUSH_MS).catch(() => undefined);
          if (Date.now() - lastFlush >= FLUSH_MS) await serial(flush);
          if (Date.now() - lastMark >= IDLE_MARK_MS) {
            lastMark = Date.now();
            await serial(async () => {
              const content = `heartbeat ${(sent += 1)}`;
              heartbeatsSent.set(content, Date.now());
              await emitMark(db, names, content);
              const wal = await readSlotWal(db, names.slot);
              const oldest = Math.min(...heartbeatsSent.values());
              // A heartbeat that has not come back yet is lag too, and grows with it.
              const seconds = Math.max(roundTripMs, heartbeatsSent.size > 1 ? Date.now() - oldest : 0) / 1000;
              lag = wal ? { ...wal, slotLagSeconds: Math.round(seconds * 1000) / 1000 } : undefined;
              if (lag) {
                metrics?.slotLagBytes.set({ migration: input.migrationId }, lag.slotLagBytes);
                metrics?.slotLagSeconds.set({ migration: input.migrationId }, lag.slotLagSeconds);
              }
            });
          }
          // Read by `ferry status` from the pending activity: progress without history.
          ctx.heartbeat({ confirmedLsn, queued, lag });
        }
        // What was received and committed on the source goes in before the slice ends.
        await serial(flush);
      } finally {
        await service.stop().catch(() => undefined);
        await streaming;
      }
      if (failure !== undefined) throw asStreamFailure(failure, names.slot);
      if (ctx.cancellationSignal.aborted) throw new CancelledFailure('capture stream cancelled');
      logger.info({ migrationId: input.migrationId, confirmedLsn, queued }, 'capture stream slice done');
      return { confirmedLsn, keys: queued };
    });
  }

  /**
   * The cutover's wait (and validation's): a logical message now, and then until the consumer
   * confirmed past it — every change committed before this call is in the change logs then.
   */
  async function awaitCaptured(input: { migrationId: string; source: string; timeoutMs?: number }): Promise<{ lsn: string }> {
    const ctx = Context.current();
    return await connections.withClient(input.source, (db) => awaitConfirmed(db, input.migrationId, input.timeoutMs ?? 60_000, () => ctx.heartbeat()));
  }

  return { streamChanges, awaitCaptured };
}

/**
 * A newer attempt takes the slot: an earlier one presumed dead (its heartbeat timed out) may
 * still hold it through a connection that has not noticed yet.
 */
async function takeSlot(db: PoolClient, slot: string): Promise<void> {
  const { rows } = await db.query('SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = $1', [slot]);
  if (rows.length === 0) {
    throw ApplicationFailure.nonRetryable(
      `replication slot ${slot} is gone from the source: changes since can no longer be captured; the migration stops without cutting over`,
      FAILURE.CaptureLost,
    );
  }
  if (rows[0].active_pid !== null) {
    await db.query('SELECT pg_catalog.pg_terminate_backend($1)', [rows[0].active_pid]);
    for (let i = 0; i < 50; i += 1) {
      const again = await db.query('SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = $1', [slot]);
      if (again.rows.length === 0 || again.rows[0].active_pid === null) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

function asStreamFailure(err: unknown, slot: string): unknown {
  // 42704: the slot was dropped under the stream.
  if (sqlState(err) === '42704') {
    return ApplicationFailure.nonRetryable(`replication slot ${slot} was dropped while streaming`, FAILURE.CaptureLost, err);
  }
  return err;
}
