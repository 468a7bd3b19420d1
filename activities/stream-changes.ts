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
import { quotedLog } from '../src/db/capture-sql';
import { isTransientState, sqlState } from '../src/db/errors';
import { awaitConfirmed, emitMark, LogicalNames, logicalNames, MARKS_TABLE, SLOT_LAG_SQL, SLOTS_TABLE, streamsMessages } from '../src/db/logical-sql';
import { sessionConfig } from '../src/db/session';
import { Key } from '../src/core/plan';
import { FAILURE } from '../src/core/failure-types';
import type { CaptureTable } from '../src/core/capture-input';
import { ActivityDeps } from './deps';
import { enqueue } from '../src/db/change-log';
import { enqueueOps, RowOp } from '../src/db/keyless-ops';
import { displayQualified } from '../src/core/identifiers';

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
/**
 * Distinct keys of one transaction held before they go into the change logs ahead of its commit
 * message, so that a transaction of millions of rows does not hold them all in the worker's memory.
 * pgoutput (protocol 1) sends a transaction only after it committed, so its keys may be queued
 * before its end arrives; the position is confirmed only with the commit, and a consumer that
 * stops in between receives the whole transaction again (a key queued twice is synced twice,
 * harmlessly).
 */
const TRANSACTION_SPILL_KEYS = 5_000;
/** A logical message this often, so an idle source still moves the slot. */
const IDLE_MARK_MS = 5_000;
/**
 * A standby status update this often, whatever the stream is doing: the WAL sender ends a
 * connection that has not answered for wal_sender_timeout (60 s by default; busy sources set
 * less), and a consumer can go that long without a commit to confirm — one transaction of
 * millions of rows, or the WAL a long-open transaction holds back, read again after a reconnect.
 */
const REPLY_MS = 1_000;

/**
 * pgoutput's text values as they come: the key must be PostgreSQL's own text of it (the change
 * logs hold keys as text, cast back by the sync), never a JavaScript parse of it.
 */
class RawPgoutputPlugin extends PgoutputPlugin {
  constructor(private readonly stream: { publication: string; messages: boolean }) {
    super({ protoVersion: 1, publicationNames: [stream.publication], messages: stream.messages });
  }

  parse(buffer: Buffer): Pgoutput.Message {
    const message = super.parse(buffer);
    if (message.tag === 'relation') for (const column of message.columns) column.parser = (raw: unknown) => raw;
    return message;
  }

  /**
   * The library names the `messages` option even when it is false, which pgoutput before
   * PostgreSQL 14 refuses ("unrecognized pgoutput option: messages"): without messages, only the
   * options every version knows. (Ferry's own names: nothing in them needs quoting.)
   */
  start(client: Parameters<PgoutputPlugin['start']>[0], slotName: string, lastLsn: string): ReturnType<PgoutputPlugin['start']> {
    if (this.stream.messages) return super.start(client, slotName, lastLsn);
    return client.query(`START_REPLICATION SLOT "${slotName}" LOGICAL ${lastLsn} (proto_version '1', publication_names '${this.stream.publication}')`);
  }
}

function relationKey(schema: string, name: string): string {
  return JSON.stringify([schema, name]);
}

/**
 * The keys one change asks to re-sync. A key column stored out of line (TOAST) that the update
 * left unchanged comes as "unchanged" in the new row; PostgreSQL then sends the old key too, and
 * its value is the new one's.
 */
export function changedKeys(message: Pgoutput.Message, keyColumns: string[]): Key[] {
  const keyOf = (tuple: Record<string, unknown> | null, unchanged: Record<string, unknown> | null = null) => {
    if (!tuple) return null;
    return keyColumns.map((k) => {
      const value = tuple[k] === undefined && unchanged ? unchanged[k] : tuple[k];
      // A key value pgoutput left out (an unchanged TOASTed value): the key to re-sync is unknown.
      if (typeof value !== 'string') {
        throw ApplicationFailure.nonRetryable(`a change arrived without the value of key column "${k}" (${value === null ? 'null' : 'not sent'}); logical capture cannot tell which row changed`, FAILURE.CaptureLost);
      }
      return value;
    });
  };
  if (message.tag === 'insert') return [keyOf(message.new)!];
  if (message.tag === 'delete') {
    const key = keyOf(message.key ?? message.old);
    // Only a table whose replica identity is NOTHING sends a delete without its old key.
    if (!key) throw ApplicationFailure.nonRetryable('a delete arrived without its old key (replica identity NOTHING); logical capture cannot tell which row was deleted', FAILURE.CaptureLost);
    return [key];
  }
  if (message.tag !== 'update') return [];
  // The old key comes only when the key changed or is stored out of line (replica identity
  // default), or always (full).
  const next = keyOf(message.new, message.key ?? message.old)!;
  const old = keyOf(message.key ?? message.old);
  return old && old.some((v, i) => v !== next[i]) ? [next, old] : [next];
}

/**
 * The row changes one decoded change makes to a table without a key (src/db/keyless-ops.ts):
 * the old row taken away, the new one added, numbered from `seq` within their transaction. Its
 * replica identity FULL sends the whole old row with every update and delete; a column stored
 * out of line that an update left unchanged comes as "unchanged" in the new row, and its value
 * is the old row's (pg-logical-replication fills it from there).
 */
export function rowOps(message: Pgoutput.Message, lsn: string, seq: number, label: string): RowOp[] {
  const image = (tuple: Record<string, unknown> | null | undefined, which: string): RowOp['image'] => {
    if (!tuple) {
      throw ApplicationFailure.nonRetryable(
        `a change of ${label} arrived without its ${which} row: its replica identity is no longer FULL, so which row changed is unknown`,
        FAILURE.CaptureLost,
      );
    }
    for (const [column, value] of Object.entries(tuple)) {
      if (value !== null && typeof value !== 'string') {
        throw ApplicationFailure.nonRetryable(`a change of ${label} arrived without the value of column "${column}"; logical capture cannot tell the row`, FAILURE.CaptureLost);
      }
    }
    return tuple as RowOp['image'];
  };
  if (message.tag === 'insert') return [{ lsn, seq, delta: 1, image: image(message.new, 'new') }];
  if (message.tag === 'delete') return [{ lsn, seq, delta: -1, image: image(message.old, 'old') }];
  if (message.tag !== 'update') return [];
  return [
    { lsn, seq, delta: -1, image: image(message.old, 'old') },
    { lsn, seq: seq + 1, delta: 1, image: image(message.new, 'new') },
  ];
}

export function createStreamActivities({ connections, logger, metrics }: ActivityDeps) {
  async function streamChanges(input: StreamInput): Promise<StreamResult> {
    const ctx = Context.current();
    const names = logicalNames(input.migrationId);
    return await connections.withClient(input.source, async (db) => {
      const slotPosition = await takeSlot(db, names.slot);
      const service = new LogicalReplicationService(sessionConfig(connections.url(input.source), 'ferry-capture', { statementTimeoutMs: 0, lockTimeoutMs: 5_000 }), {
        acknowledge: { auto: false, timeoutSeconds: 0 },
        flowControl: { enabled: true },
      });
      const slice = new StreamSlice(db, service, input, names, ctx, metrics, slotPosition);
      await slice.run();
      if (slice.failure !== undefined) throw asStreamFailure(slice.failure, names.slot, slice.streaming);
      if (ctx.cancellationSignal.aborted) throw new CancelledFailure('capture stream cancelled');
      logger.info({ migrationId: input.migrationId, confirmedLsn: slice.confirmedLsn, queued: slice.queued }, 'capture stream slice done');
      return { confirmedLsn: slice.confirmedLsn, keys: slice.queued };
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
 * Confirms `lsn` to the slot: the slot's confirmed position becomes exactly `lsn`. The positions
 * pgoutput gives (a commit's end, a message's end) are where the next WAL record begins, and the
 * server resumes with the transactions whose commit record begins at or after the confirmed
 * position. pg-logical-replication's acknowledge(x) reports x + 1 (a physical standby's "last
 * byte + 1"), which would skip a transaction whose commit record directly follows the confirmed
 * one; so it is handed the byte before.
 */
export async function confirmPosition(service: LogicalReplicationService, lsn: string): Promise<void> {
  const [high, low] = lsn.split('/').map((half) => parseInt(half, 16));
  const before = low === 0 ? `${(high - 1).toString(16)}/FFFFFFFF` : `${high.toString(16)}/${(low - 1).toString(16)}`;
  await service.acknowledge(before.toUpperCase());
}

/** Keys to re-sync by table index, each key under its JSON text. */
type KeysByTable = Map<number, Map<string, Key>>;
/** Row changes of tables without a key, by table index, in stream order. */
type OpsByTable = Map<number, RowOp[]>;

/**
 * One slice of the consumer: the slot's stream for `sliceMs`, the keys it brings, and the flush
 * that commits them with their position before confirming that position to the slot.
 */
class StreamSlice {
  /** The position up to which every change is in the change logs. */
  confirmedLsn: string | null = null;
  /** Keys written into the change logs in this slice. */
  queued = 0;
  /** The first failure of the stream or of a step; nothing runs after it. */
  failure: unknown;
  /** Whether the server began streaming (answered START_REPLICATION). */
  streaming = false;
  /** Whether the source's pgoutput streams logical messages (PostgreSQL 14 on), asked once as the slice starts. */
  private messages = true;

  private readonly tables: Map<string, CaptureTable>;
  /** The table each relation the stream announced stands for (null: not one of ours), looked up once per relation message. */
  private readonly byRelation = new WeakMap<Pgoutput.MessageRelation, CaptureTable | null>();
  /** Keys of the transaction being received; keys of committed ones waiting for the flush. */
  private current: KeysByTable = new Map();
  private currentOps: OpsByTable = new Map();
  private currentKeys = 0;
  /** The transaction being received: its commit position (begin's final LSN) and its row changes so far. */
  private transaction: { lsn: string | null; seq: number } = { lsn: null, seq: 0 };
  private pending: KeysByTable = new Map();
  private pendingOps: OpsByTable = new Map();
  private pendingKeys = 0;
  private pendingLsn: string | null = null;
  /** The content of the mark row the transaction being received inserted (a source before PostgreSQL 14). */
  private transactionMark: string | undefined;
  private lastFlush = Date.now();
  private chain: Promise<void> = Promise.resolve();
  private readonly heartbeats = new HeartbeatClock();
  private lag: SlotLag | undefined;

  constructor(
    private readonly db: PoolClient,
    private readonly service: LogicalReplicationService,
    private readonly input: StreamInput,
    private readonly names: LogicalNames,
    private readonly ctx: Context,
    private readonly metrics: ActivityDeps['metrics'],
    /** The slot's confirmed position as this slice took it: what is answered before the first flush. */
    private readonly slotPosition: string,
  ) {
    this.tables = new Map(input.tables.map((t) => [relationKey(t.source.schema, t.source.name), t]));
    // With flow control the service awaits each call before it hands over the next message.
    service.on('data', (_lsn: string, message: Pgoutput.Message) => this.onMessage(message));
    service.on('error', (err: unknown) => {
      this.failure ??= err;
    });
    service.on('start', () => {
      this.streaming = true;
    });
    // A keepalive that asks for an answer gets one at once (REPLY_MS answers the rest).
    service.on('heartbeat', (_lsn: string, _timestamp: number, shouldRespond: boolean) => {
      if (shouldRespond) this.answer();
    });
  }

  /**
   * Tells the WAL sender the consumer is alive, with the position confirmed last — never the
   * library's last received one (its own timer's choice), which may lie past keys that are not
   * in the logs yet. A position the slot has already confirmed moves nothing.
   */
  private answer(): void {
    confirmPosition(this.service, this.confirmedLsn ?? this.slotPosition).catch((err: unknown) => {
      this.failure ??= err;
    });
  }

  /** Streams until the slice is over, cancelled or failed; flushes every FLUSH_MS and sends a heartbeat every IDLE_MARK_MS. */
  async run(): Promise<void> {
    const { ctx, input } = this;
    this.messages = await streamsMessages(this.db);
    const plugin = new RawPgoutputPlugin({ publication: this.names.publication, messages: this.messages });
    const started = Date.now();
    const streaming = this.service.subscribe(plugin, this.names.slot).then(
      () => {
        if (Date.now() - started < input.sliceMs && !ctx.cancellationSignal.aborted) this.failure ??= new Error('the replication stream ended');
      },
      (err: unknown) => {
        this.failure ??= err;
      },
    );
    let lastMark = 0;
    const answering = setInterval(() => this.answer(), REPLY_MS);
    try {
      while (Date.now() - started < input.sliceMs && !ctx.cancellationSignal.aborted && this.failure === undefined) {
        await ctx.sleep(FLUSH_MS).catch(() => undefined);
        if (Date.now() - this.lastFlush >= FLUSH_MS) await this.serial(() => this.flush());
        if (Date.now() - lastMark >= IDLE_MARK_MS) {
          lastMark = Date.now();
          await this.serial(() => this.sendHeartbeat());
        }
        // Read by `ferry status` from the pending activity: progress without history.
        ctx.heartbeat({ confirmedLsn: this.confirmedLsn, queued: this.queued, lag: this.lag });
      }
      // What was received and committed on the source goes in before the slice ends.
      await this.serial(() => this.flush());
    } finally {
      clearInterval(answering);
      await this.service.stop().catch(() => undefined);
      await streaming;
    }
  }

  /**
   * Everything that touches `db` or the stream's state runs one after the other, and nothing
   * more after a failure: a later flush would confirm a position past keys that were lost
   * with the failed one (the retry resumes from the slot instead).
   */
  private serial(step: () => Promise<void>): Promise<void> {
    this.chain = this.chain
      .then(() => (this.failure === undefined ? step() : undefined))
      .catch((err: unknown) => {
        this.failure ??= err;
      });
    return this.chain;
  }

  /**
   * A transaction's changes and its commit are noted at once, in memory (the flush that may be
   * running works on the keys it took before); only the steps that touch the source go through
   * `serial`, after whatever step runs now.
   */
  private onMessage(message: Pgoutput.Message): Promise<void> | undefined {
    if (this.failure !== undefined) return undefined;
    try {
      switch (message.tag) {
        case 'begin':
          this.transactionMark = undefined;
          this.current = new Map();
          this.currentOps = new Map();
          this.currentKeys = 0;
          this.transaction = { lsn: message.commitLsn ?? null, seq: 0 };
          return undefined;
        case 'insert':
        case 'update':
        case 'delete': {
          if (message.tag === 'insert' && this.isMarks(message.relation)) {
            // A source before PostgreSQL 14: a mark is a row, read as the message at its commit.
            if (message.new.prefix === this.names.messagePrefix) this.transactionMark = String(message.new.content);
            return undefined;
          }
          const table = this.tableOf(message.relation);
          if (table) this.currentKeys += this.note(table, message);
          if (this.currentKeys < TRANSACTION_SPILL_KEYS) return undefined;
          const keys = this.current;
          const ops = this.currentOps;
          this.current = new Map();
          this.currentOps = new Map();
          this.currentKeys = 0;
          return this.serial(() => this.spill(keys, ops));
        }
        case 'commit':
          return this.onCommit(message);
        case 'message': {
          if (message.prefix !== this.names.messagePrefix) return undefined;
          this.pendingLsn = message.messageLsn;
          const content = Buffer.from(message.content).toString();
          return this.serial(() => this.markReceived(content));
        }
        default:
          return undefined;
      }
    } catch (err) {
      this.failure ??= err;
      return undefined;
    }
  }

  /** The transaction's keys wait for the flush, which runs when enough wait or its mark asks for it. */
  private onCommit(message: Pgoutput.MessageCommit): Promise<void> | undefined {
    for (const [index, keys] of this.current) {
      addKeys(this.pending, index, keys.values());
      this.pendingKeys += keys.size;
    }
    for (const [index, ops] of this.currentOps) {
      addOps(this.pendingOps, index, ops);
      this.pendingKeys += ops.length;
    }
    this.current = new Map();
    this.currentOps = new Map();
    this.currentKeys = 0;
    this.pendingLsn = message.commitEndLsn;
    if (this.transactionMark !== undefined) {
      const content = this.transactionMark;
      this.transactionMark = undefined;
      return this.serial(() => this.markReceived(content));
    }
    return this.pendingKeys >= FLUSH_KEYS ? this.serial(() => this.flush()) : undefined;
  }

  /** A change of one of our tables noted in the transaction's keys (or, without a key, its row changes); returns how many it added. */
  private note(table: CaptureTable, message: Pgoutput.MessageInsert | Pgoutput.MessageUpdate | Pgoutput.MessageDelete): number {
    if (table.keyColumns.length > 0) return addKeys(this.current, table.index, changedKeys(message, table.keyColumns.map((k) => k.name)));
    // Without its transaction's position a change could not be told from one the copy holds.
    if (!this.transaction.lsn) throw ApplicationFailure.nonRetryable(`a change of ${displayQualified(table.source)} arrived without its transaction's commit position`, FAILURE.CaptureLost);
    const ops = rowOps(message, this.transaction.lsn, this.transaction.seq, displayQualified(table.source));
    this.transaction.seq += ops.length;
    addOps(this.currentOps, table.index, ops);
    return ops.length;
  }

  /** A mark or heartbeat: confirmed at once, since someone may be waiting for it. */
  private async markReceived(content: string): Promise<void> {
    await this.flush();
    this.heartbeats.received(content);
  }

  private isMarks(relation: Pgoutput.MessageRelation): boolean {
    return relation.schema === MARKS_TABLE.schema && relation.name === MARKS_TABLE.name;
  }

  private tableOf(relation: Pgoutput.MessageRelation): CaptureTable | null {
    let table = this.byRelation.get(relation);
    if (table === undefined) {
      table = this.tables.get(relationKey(relation.schema, relation.name)) ?? null;
      this.byRelation.set(relation, table);
    }
    return table;
  }

  /** The pending keys and their position in one source transaction; then, only then, the position confirmed to the slot. */
  private async flush(): Promise<void> {
    if (this.pendingLsn === null) return;
    const lsn = this.pendingLsn;
    const batches = this.pending;
    const ops = this.pendingOps;
    this.pending = new Map();
    this.pendingOps = new Map();
    this.pendingKeys = 0;
    this.pendingLsn = null;
    const { db, input } = this;
    await inTransaction(db, async () => {
      await this.enqueueKeys(batches, ops);
      await db.query(`UPDATE ${SLOTS_TABLE} SET confirmed_lsn = $2::pg_lsn, confirmed_at = clock_timestamp() WHERE migration_id = $1`, [input.migrationId, lsn]);
    });
    // Only now: the slot may let go of what the logs hold.
    await confirmPosition(this.service, lsn);
    this.confirmedLsn = lsn;
    this.lastFlush = Date.now();
  }

  /** Keys of a transaction still arriving into the change logs, its position not confirmed (TRANSACTION_SPILL_KEYS). */
  private async spill(batches: KeysByTable, ops: OpsByTable): Promise<void> {
    await inTransaction(this.db, () => this.enqueueKeys(batches, ops));
  }

  /** Writes keys (and row changes) into their tables' change logs, in the caller's transaction. */
  private async enqueueKeys(batches: KeysByTable, ops: OpsByTable): Promise<void> {
    for (const [index, keys] of batches) {
      await enqueue(this.db, quotedLog(this.input.migrationId, index), [...keys.values()]);
      this.queued += keys.size;
    }
    for (const [index, changes] of ops) {
      await enqueueOps(this.db, quotedLog(this.input.migrationId, index), changes);
      this.queued += changes.length;
    }
  }

  /** A heartbeat message into the slot, and the lag as it stands (also to the worker's metrics). */
  private async sendHeartbeat(): Promise<void> {
    await emitMark(this.db, this.names, this.heartbeats.next(), this.messages);
    const wal = await readSlotWal(this.db, this.names.slot);
    this.lag = wal ? { ...wal, slotLagSeconds: this.heartbeats.lagSeconds() } : undefined;
    if (this.lag) {
      this.metrics?.slotLagBytes.set({ migration: this.input.migrationId }, this.lag.slotLagBytes);
      this.metrics?.slotLagSeconds.set({ migration: this.input.migrationId }, this.lag.slotLagSeconds);
    }
  }
}

/**
 * Adds keys to a table's set (a one-column key by its value, others by their JSON text: a table's
 * keys all have as many columns); returns how many were not in it yet.
 */
function addKeys(into: KeysByTable, index: number, keys: Iterable<Key>): number {
  let set = into.get(index);
  if (!set) into.set(index, (set = new Map()));
  const before = set.size;
  for (const key of keys) set.set(key.length === 1 ? key[0] : JSON.stringify(key), key);
  return set.size - before;
}

function addOps(into: OpsByTable, index: number, ops: RowOp[]): void {
  const list = into.get(index);
  if (list) list.push(...ops);
  else into.set(index, [...ops]);
}

/** Heartbeat messages on their way through the slot, and the commit-to-log lag they measure. */
class HeartbeatClock {
  /** Heartbeats sent and not yet back: content → when sent. */
  private readonly sent = new Map<string, number>();
  private roundTripMs = 0;
  private count = 0;

  /** The next heartbeat's content, noted as sent now. */
  next(): string {
    const content = `heartbeat ${(this.count += 1)}`;
    this.sent.set(content, Date.now());
    return content;
  }

  /** A message of ours came through the slot: a heartbeat's round trip is the lag now. */
  received(content: string): void {
    const sentAt = this.sent.get(content);
    if (sentAt === undefined) return;
    this.roundTripMs = Date.now() - sentAt;
    this.sent.clear();
  }

  /** The last round trip in seconds; a heartbeat that has not come back yet is lag too, and grows with it. */
  lagSeconds(): number {
    const oldest = Math.min(...this.sent.values());
    const seconds = Math.max(this.roundTripMs, this.sent.size > 1 ? Date.now() - oldest : 0) / 1000;
    return Math.round(seconds * 1000) / 1000;
  }
}

/**
 * A newer attempt takes the slot: an earlier one presumed dead (its heartbeat timed out) may
 * still hold it through a connection that has not noticed yet. Returns the slot's confirmed
 * position, where its stream resumes.
 */
async function takeSlot(db: PoolClient, slot: string): Promise<string> {
  const { rows } = await db.query('SELECT active_pid, confirmed_flush_lsn::text AS confirmed FROM pg_catalog.pg_replication_slots WHERE slot_name = $1', [slot]);
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
      if (again.rows.length === 0 || again.rows[0].active_pid === null) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return rows[0].confirmed;
}

/**
 * The stream's failure as the activity throws it. A server that refused to start the stream
 * with an error no retry heals (an option or a feature its version lacks, a refused
 * configuration — PostgreSQL reports some of these as internal errors, XX000) fails the
 * migration at once with its words; a busy slot, a connection or resource error, a shutdown
 * stay retryable.
 */
export function asStreamFailure(err: unknown, slot: string, streaming: boolean): unknown {
  const code = sqlState(err);
  // 42704: the slot was dropped under the stream.
  if (code === '42704') {
    return ApplicationFailure.nonRetryable(`replication slot ${slot} was dropped while streaming`, FAILURE.CaptureLost, err);
  }
  if (!streaming && code !== undefined && !isTransientState(code)) {
    return ApplicationFailure.nonRetryable(
      `the source refused to stream slot ${slot} (${code}: ${(err as Error).message}); no retry can change that: see docs/moving-data.md, Major-version upgrades`,
      FAILURE.LogicalCaptureUnavailable,
      err,
    );
  }
  return err;
}
