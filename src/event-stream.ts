/**
 * Ferry's events on a NATS JetStream stream, for services that subscribe instead of being
 * called: every event of every migration and change plan, on subject
 * `ferry.<kind>.<id>.<EventType>` (kind `migration` or `change`; a `.` in an id is written `%2E`,
 * as a subject's tokens are split at dots), its payload the event document the status shows plus
 * `id` and `kind`, its JetStream message id `<id>:<seq>` so that a retried publish is stored once
 * (within the stream's duplicate window). The stream `FERRY_EVENTS` is created when missing.
 *
 * Configured by the environment of workers and clients: FERRY_NATS_URL (servers, comma-separated),
 * credentials from FERRY_SECRET_NATS_TOKEN or FERRY_SECRET_NATS_USER and
 * FERRY_SECRET_NATS_PASSWORD, and the streams' limits FERRY_EVENTS_MAX_AGE (7d),
 * FERRY_EVENTS_MAX_BYTES, FERRY_EVENTS_MAX_MESSAGES and FERRY_EVENTS_REPLICAS (src/core/stream-limits.ts).
 */
import { DeliverPolicy, jetstream, jetstreamManager, JetStreamManager, StorageType } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { StreamLimits, streamLimits } from './core/stream-limits';
import { approvalSubject, CONTROL_STREAM, EVENTS_STREAM, eventSubject, NATS_URL_ENV, StreamedEvent, subjectToken } from './core/event-subjects';

export { EVENTS_STREAM, eventSubject, NATS_URL_ENV, runSubjects, subjectToken } from './core/event-subjects';
export type { EventKind, StreamedEvent } from './core/event-subjects';

/** How long a retried publish is recognised as one already stored. */
const DUPLICATE_WINDOW_MS = 60 * 60_000;

export function natsConfigured(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env[NATS_URL_ENV]);
}

/** A connection to the servers FERRY_NATS_URL names, with the FERRY_SECRET_NATS_* credentials. */
export async function connectNats(env: NodeJS.ProcessEnv, name: string): Promise<NatsConnection> {
  const servers = (env[NATS_URL_ENV] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (servers.length === 0) throw new Error(`${NATS_URL_ENV} is not set: set it to the NATS servers (nats://host:4222) to publish and read events`);
  return connect({
    servers,
    name,
    ...(env.FERRY_SECRET_NATS_TOKEN ? { token: env.FERRY_SECRET_NATS_TOKEN } : {}),
    ...(env.FERRY_SECRET_NATS_USER ? { user: env.FERRY_SECRET_NATS_USER, pass: env.FERRY_SECRET_NATS_PASSWORD ?? '' } : {}),
    // A publish that cannot reach a server fails at once; Temporal retries the activity.
    maxReconnectAttempts: -1,
    reconnectTimeWait: 1_000,
    timeout: 5_000,
  });
}

/**
 * The streams, each created when missing with the configured limits: the events, and the control
 * messages (approvals) that act on runs. A limit whose variable is set is applied to a stream
 * that exists too (one an operator made with other limits keeps those the variables leave out).
 */
export async function ensureStream(jsm: JetStreamManager, env: NodeJS.ProcessEnv): Promise<void> {
  const limits = streamLimits(env);
  await ensureOne(jsm, EVENTS_STREAM, ['ferry.migration.>', 'ferry.change.>'], limits);
  await ensureOne(jsm, CONTROL_STREAM, ['ferry.control.>'], limits);
}

/** JetStream's names for the limits (ages in nanoseconds). */
function streamConfig(limits: StreamLimits) {
  return { max_age: limits.maxAgeMs * 1_000_000, max_bytes: limits.maxBytes, max_msgs: limits.maxMessages, num_replicas: limits.replicas };
}

const CONFIG_FIELD = { maxAgeMs: 'max_age', maxBytes: 'max_bytes', maxMessages: 'max_msgs', replicas: 'num_replicas' } as const;

async function ensureOne(jsm: JetStreamManager, name: string, subjects: string[], limits: StreamLimits): Promise<void> {
  const wanted = streamConfig(limits);
  let existing: Awaited<ReturnType<JetStreamManager['streams']['info']>> | undefined;
  try {
    existing = await jsm.streams.info(name);
  } catch (err) {
    if (!/stream not found/i.test((err as Error).message)) throw err;
  }
  if (existing) {
    const changed = limits.given.map((field) => CONFIG_FIELD[field]).filter((key) => existing!.config[key] !== wanted[key]);
    if (changed.length === 0) return;
    const update: Record<string, number> = Object.fromEntries(changed.map((key) => [key, wanted[key]]));
    // The duplicate window may not outlast the events it remembers.
    if (existing.config.duplicate_window > wanted.max_age) update.duplicate_window = wanted.max_age;
    await jsm.streams.update(name, update);
    return;
  }
  await jsm.streams
    .add({ name, subjects, storage: StorageType.File, ...wanted, duplicate_window: Math.min(DUPLICATE_WINDOW_MS, limits.maxAgeMs) * 1_000_000 })
    .catch(async (err: Error) => {
      // Another worker made it meanwhile.
      if (!/already in use|exists/i.test(err.message)) throw err;
    });
}

/** A control message as read: its body, its signature header, its stream sequence. */
export interface ControlMessage {
  seq: number;
  body: string;
  signature: string;
}

/**
 * Run `id`'s approval messages stored after stream sequence `afterSeq`, as they come, until
 * `untilMs` (a moment) or `signal`.
 */
export async function* approvalMessages(nc: NatsConnection, id: string, afterSeq: number, untilMs: number, signal?: AbortSignal): AsyncGenerator<ControlMessage> {
  const js = jetstream(nc);
  const start = afterSeq > 0 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: afterSeq + 1 } : { deliver_policy: DeliverPolicy.All };
  const consumer = await js.consumers.get(CONTROL_STREAM, { filter_subjects: approvalSubject(id), ...start });
  while (Date.now() < untilMs && !signal?.aborted) {
    const batch = await consumer.fetch({ max_messages: 10, expires: Math.max(1_000, Math.min(2_000, untilMs - Date.now())) });
    for await (const message of batch) {
      yield { seq: message.seq, body: message.string(), signature: message.headers?.get('X-Ferry-Signature') ?? '' };
    }
  }
}

/**
 * Publishes `events` of one run in order, each acknowledged by the stream before the next; one
 * already stored (a retry's) is acknowledged as a duplicate and stored once.
 */
export async function publishEvents(nc: NatsConnection, events: StreamedEvent[]): Promise<{ stored: number; duplicates: number }> {
  const js = jetstream(nc);
  let stored = 0;
  let duplicates = 0;
  for (const event of events) {
    const ack = await js.publish(eventSubject(event.kind, event.id, event.type), JSON.stringify(event), { msgID: `${event.id}:${event.seq}`, timeout: 5_000 });
    if (ack.duplicate) duplicates += 1;
    else stored += 1;
  }
  return { stored, duplicates };
}

export interface ReadOptions {
  /** One run's events (any kind); all runs' when absent. */
  id?: string;
  /** Only these event types. */
  types?: string[];
  /** From this run's event seq on (with an id), or this stream sequence on (without). */
  sinceSeq?: number;
  /** From this moment on. */
  sinceTime?: Date;
  /** Keep reading as events arrive (else end at the stream's last event). */
  follow?: boolean;
  /** Ends a follow. */
  signal?: AbortSignal;
}

/** The stream's events as `options` choose, in the stream's order. */
export async function* readEvents(nc: NatsConnection, options: ReadOptions = {}): AsyncGenerator<StreamedEvent> {
  const js = jetstream(nc);
  const filter = options.id ? await runFilter(nc, options.id) : 'ferry.>';
  const start: Record<string, unknown> = options.sinceTime
    ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: options.sinceTime.toISOString() }
    : !options.id && options.sinceSeq
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: options.sinceSeq }
      : { deliver_policy: DeliverPolicy.All };
  const consumer = await js.consumers.get(EVENTS_STREAM, { filter_subjects: filter, ...start });
  const types = options.types?.length ? new Set(options.types) : undefined;
  // What is there now (the consumer's count, once); then each message says how many follow it.
  let pending = (await consumer.info(true)).num_pending;
  for (;;) {
    if (options.signal?.aborted || (pending === 0 && !options.follow)) return;
    const batch = await consumer.fetch({ max_messages: options.follow ? 500 : Math.min(pending, 500), expires: 2_000 });
    let read = 0;
    for await (const message of batch) {
      read += 1;
      pending = message.info.pending;
      const event = { ...(message.json() as StreamedEvent), streamSeq: message.seq };
      if (types && !types.has(event.type)) continue;
      if (options.id && options.sinceSeq && event.seq < options.sinceSeq) continue;
      yield event;
    }
    if (read === 0 && !options.follow) return;
  }
}

/**
 * The filter of one run's events. A run is a migration or a change plan (their ids are one
 * namespace), and a server before 2.10 takes no wildcard where the stream's subjects name the
 * kind: the kind whose subject holds events, a migration's when neither does yet.
 */
async function runFilter(nc: NatsConnection, id: string): Promise<string> {
  const jsm = await jetstreamManager(nc);
  const change = `ferry.change.${subjectToken(id)}.*`;
  const info = await jsm.streams.info(EVENTS_STREAM, { subjects_filter: change });
  return (info.state.subjects && Object.keys(info.state.subjects).length > 0) ? change : `ferry.migration.${subjectToken(id)}.*`;
}

/** The manager, for the stream's creation. */
export function manager(nc: NatsConnection): Promise<JetStreamManager> {
  return jetstreamManager(nc);
}

/**
 * A worker's publisher: one connection, opened at its first publish and kept, and the stream made
 * sure of once per connection. Closed with the worker.
 */
export class EventPublisher {
  private connection?: Promise<NatsConnection>;
  private streamReady = false;

  constructor(private readonly env: NodeJS.ProcessEnv) {}

  get configured(): boolean {
    return natsConfigured(this.env);
  }

  async publish(events: StreamedEvent[]): Promise<{ stored: number; duplicates: number }> {
    return publishEvents(await this.ready(), events);
  }

  /** The connection, with the streams made sure of. */
  async ready(): Promise<NatsConnection> {
    this.connection ??= connectNats(this.env, 'ferry-worker');
    let nc: NatsConnection;
    try {
      nc = await this.connection;
    } catch (err) {
      // The next attempt connects anew.
      this.connection = undefined;
      throw err;
    }
    if (!this.streamReady) {
      await ensureStream(await manager(nc), this.env);
      this.streamReady = true;
    }
    return nc;
  }

  async close(): Promise<void> {
    const nc = await this.connection?.catch(() => undefined);
    await nc?.close().catch(() => undefined);
  }
}
