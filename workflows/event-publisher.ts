/**
 * eventPublisherWorkflow: the events a run had not yet put on the stream when it ended — NATS was
 * down — published in order by the same activity as the run's own, retried until NATS answers.
 * The run hands them over and ends, so its result never waits for the stream.
 *
 * Order and once-only hold across the hand-over: the run's last publish may still be in flight
 * on a worker and land later, but it carries the same first events with the same message ids,
 * and each publish waits for the stream's acknowledgement before the next; whichever copy comes
 * second is a duplicate the stream drops (within its duplicate window of an hour).
 */
import { eventStreamActivities } from './activity-options';
import type { EventKind, RunEvent } from '../src/core/event-subjects';
import { timingsOf, type TimingsInput } from '../src/core/timings';

export interface EventPublisherInput {
  kind: EventKind;
  /** The run's workflow id (its events' subjects and message ids). */
  id: string;
  /** In order, from the first the stream may not have. */
  events: RunEvent[];
  timings?: TimingsInput;
}

/** Events a publish activity carries at most (as the run's own publisher). */
export const STREAM_BATCH = 100;

export async function eventPublisherWorkflow({ kind, id, events, timings }: EventPublisherInput): Promise<{ published: number }> {
  const { publishEvents } = eventStreamActivities(timingsOf(timings));
  for (let from = 0; from < events.length; from += STREAM_BATCH) {
    const done = await publishEvents({ kind, id, events: events.slice(from, from + STREAM_BATCH) });
    // The workers lost FERRY_NATS_URL meanwhile: nobody publishes.
    if (!done.enabled) return { published: from };
  }
  return { published: events.length };
}
