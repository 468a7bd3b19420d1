/**
 * A run's callbacks, shared by migrations and change plans: event webhooks while it runs (one
 * delivery per event, each with its own idempotency key, never cancelled), and the result last,
 * after the event deliveries still in flight.
 */
import { allHandlersFinished, CancellationScope, condition, upsertMemo } from '@temporalio/workflow';
import { rootMessage } from '../src/core/failures';
import type { MigrationActivities } from './activity-options';

interface Callback {
  url: string;
  secret?: string;
  events?: boolean;
}

export class Callbacks {
  private readonly deliveries: Promise<unknown>[] = [];

  /** `id`: the workflow id, the idempotency key of the result and the prefix of each event's. */
  constructor(
    private readonly id: string,
    private readonly callback: Callback | undefined,
    /** The callback activity, retried as the run's timings say. */
    private readonly notify: MigrationActivities['notify'],
  ) {}

  /** What the tracker calls for every appended event (undefined when no event webhooks were asked for). */
  eventSender(): ((event: { seq: number }) => void) | undefined {
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

  /** Waits for the event deliveries in flight (before the run ends or continues as new). */
  async settled(): Promise<void> {
    await CancellationScope.nonCancellable(() => Promise.all(this.deliveries));
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
