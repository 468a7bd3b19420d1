/**
 * A run's callbacks, shared by migrations and change plans: event webhooks while it runs (one
 * delivery per event, each with its own idempotency key, never cancelled), and the result last,
 * after the event deliveries still in flight.
 */
import { allHandlersFinished, CancellationScope, condition, ParentClosePolicy, startChild, upsertMemo } from '@temporalio/workflow';
import { rootMessage } from '../src/core/failures';
import type { eventStreamActivities, MigrationActivities } from './activity-options';
import { EVENTS_STREAM, runSubjects } from '../src/core/event-subjects';
import type { EventKind, EventStreamWhere, RunEvent } from '../src/core/event-subjects';
import { workflowIds } from '../src/core/names';
import type { TimingsInput } from '../src/core/timings';
import { eventPublisherWorkflow, STREAM_BATCH } from './event-publisher';
import { flags } from './patches';

interface Callback {
  url: string;
  secret?: string;
  events?: boolean;
}

/** Where a run's events also go: the event stream, through the workers that have one. */
export interface EventStreamTarget {
  kind: EventKind;
  publish: ReturnType<typeof eventStreamActivities>;
  /** Told once, when the first burst was published (the status then says where events go). */
  onEnabled: (where: EventStreamWhere) => void;
  /** The run's own timings, for the publisher it may hand its last events to. */
  timings?: TimingsInput;
}

/**
 * How long a run that has ended waits for its events to reach the stream before it hands them
 * to a publisher workflow: long enough for a publish that is merely slow, far shorter than an outage.
 */
const STREAM_GRACE_MS = 10_000;

export class Callbacks {
  private readonly deliveries: Promise<unknown>[] = [];
  /** Events not yet on the stream, in order; undefined once the workers said they publish none. */
  private unpublished: RunEvent[] | undefined = [];
  private pumping?: Promise<void>;

  /** `id`: the workflow id, the idempotency key of the result and the prefix of each event's. */
  constructor(
    private readonly id: string,
    private readonly callback: Callback | undefined,
    /** The callback activity, retried as the run's timings say. */
    private readonly notify: MigrationActivities['notify'],
    private readonly stream?: EventStreamTarget,
  ) {}

  /** What the tracker calls for every appended event: the event webhooks, the event stream. */
  eventSender(): ((event: RunEvent) => void) | undefined {
    const webhook = this.webhookSender();
    if (!this.stream) return webhook;
    return (event) => {
      webhook?.(event);
      this.toStream(event);
    };
  }

  private webhookSender(): ((event: { seq: number }) => void) | undefined {
    if (!this.callback?.events) return undefined;
    const { url, secret } = this.callback;
    const id = this.id;
    return (event) => {
      this.deliveries.push(
        CancellationScope.nonCancellable(() => this.notify.sendCallback({ url, secret, idempotencyKey: `${id}:${event.seq}`, body: { task_id: id, event } })).catch(
          () => undefined,
        ),
      );
    };
  }

  /**
   * Queues the event for the stream and keeps one publisher running: it takes whatever has
   * queued, in order, and publishes it in one activity, retried until the stream takes it — so
   * an outage delays events and the run goes on. Executions begun before patch `event-stream`
   * publish nothing (the flag is read at the first event, in the task that publishes it).
   */
  private toStream(event: RunEvent): void {
    if (!this.unpublished) return;
    if (this.pumping === undefined && this.unpublished.length === 0 && !this.streamAsked) {
      this.streamAsked = true;
      if (!flags.eventStream) {
        this.unpublished = undefined;
        return;
      }
    }
    this.unpublished.push(event);
    this.pumping ??= this.pump();
  }

  private streamAsked = false;

  private async pump(): Promise<void> {
    const { kind, publish, onEnabled } = this.stream!;
    while (this.unpublished && this.unpublished.length > 0 && !this.handedOver) {
      const batch = this.unpublished.slice(0, STREAM_BATCH);
      const done = await CancellationScope.nonCancellable(() => publish.publishEvents({ kind, id: this.id, events: batch }));
      if (!done.enabled) {
        this.unpublished = undefined;
        break;
      }
      if (!this.published) onEnabled({ stream: EVENTS_STREAM, subjects: runSubjects(kind, this.id) });
      this.published = true;
      this.unpublished.splice(0, batch.length);
    }
    this.pumping = undefined;
  }

  private published = false;

  /** Waits for the event deliveries in flight and the events not yet on the stream (before the run ends or continues as new). */
  async settled(): Promise<void> {
    await CancellationScope.nonCancellable(() => Promise.all(this.deliveries));
    await CancellationScope.nonCancellable(() => this.streamDrained());
  }

  /** Until the publisher has nothing left (a pump started meanwhile is waited for too). */
  private async streamDrained(): Promise<void> {
    while (this.pumping) await this.pumping;
  }

  /** The events not yet on the stream went to a publisher workflow: this run publishes no more. */
  private handedOver = false;

  /**
   * At the run's end: its events published, or — the stream not taking them within
   * STREAM_GRACE_MS — handed to eventPublisherWorkflow, which outlives the run, so the result
   * does not wait for NATS. Executions begun before patch `detached-event-publisher` wait.
   */
  private async publishedOrHandedOver(): Promise<void> {
    if (this.pumping === undefined) return;
    if (flags.detachedEventPublisher && !(await condition(() => this.pumping === undefined, STREAM_GRACE_MS))) {
      const events = [...(this.unpublished ?? [])];
      try {
        await startChild(eventPublisherWorkflow, {
          workflowId: workflowIds.events(this.id),
          parentClosePolicy: ParentClosePolicy.ABANDON,
          staticSummary: `${events.length} event(s) of ${this.id} for the stream`,
          args: [{ kind: this.stream!.kind, id: this.id, events, ...(this.stream!.timings ? { timings: this.stream!.timings } : {}) }],
        });
        this.handedOver = true;
        return;
      } catch {
        // An earlier run's publisher of the same id still publishes: this one waits, as before.
      }
    }
    await this.streamDrained();
  }

  /**
   * The ending: the result callback (not cancellable; its outcome goes in `result.callback`),
   * the event deliveries in flight, the events on the stream (or handed over), the result in
   * the memo, every handler finished.
   */
  async finish(result: { callback?: { delivered: boolean; error?: string } }): Promise<void> {
    if (this.callback) {
      const { url, secret } = this.callback;
      result.callback = await CancellationScope.nonCancellable(() =>
        this.notify
          .sendCallback({ url, secret, idempotencyKey: this.id, body: result })
          .then(() => ({ delivered: true }))
          .catch((err: unknown) => ({ delivered: false, error: rootMessage(err) })),
      );
    }
    await CancellationScope.nonCancellable(() => Promise.all(this.deliveries));
    await CancellationScope.nonCancellable(() => this.publishedOrHandedOver());
    upsertMemo({ result });
    await condition(allHandlersFinished);
  }
}
