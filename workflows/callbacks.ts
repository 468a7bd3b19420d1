/**
 * A run's callbacks, shared by migrations and change plans: event webhooks while it runs (one
 * delivery per event, each with its own idempotency key, never cancelled), and the result last,
 * after the event deliveries still in flight.
 */
import { allHandlersFinished, CancellationScope, condition, upsertMemo } from '@temporalio/workflow';
import { rootMessage } from '../src/core/failures';
import type { eventStreamActivities, MigrationActivities } from './activity-options';
import { EVENTS_STREAM, runSubjects } from '../src/core/event-subjects';
import type { EventKind, EventStreamWhere, RunEvent } from '../src/core/event-subjects';
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
}

/** Events a publish activity carries at most. */
const STREAM_BATCH = 100;

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
    while (this.unpublished && this.unpublished.length > 0) {
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
    await CancellationScope.nonCancellable(async () => {
      while (this.pumping) await this.pumping;
    });
  }

  /**
   * The ending: the result callback (not cancellable; its outcome goes in `result.callback`),
   * the event deliveries in flight, the result in the memo, every handler finished.
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
    await this.settled();
    upsertMemo({ result });
    await condition(allHandlersFinished);
  }
}
