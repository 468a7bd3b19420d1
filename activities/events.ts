/**
 * publishEvents: a burst of one run's events onto the NATS JetStream stream (src/event-stream.ts),
 * in order, each with its message id `<id>:<seq>` so that a retried publish is stored once. A
 * worker without FERRY_NATS_URL answers `enabled: false` and the run publishes no more; a stream
 * that cannot be reached fails the attempt, and Temporal retries it until it can.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { EventKind, RunEvent } from '../src/core/event-subjects';
import { ActivityDeps } from './deps';

export interface PublishEventsInput {
  kind: EventKind;
  id: string;
  events: RunEvent[];
}

export function createEventActivities({ events, logger }: Pick<ActivityDeps, 'events' | 'logger'>) {
  return {
    async publishEvents(input: PublishEventsInput): Promise<{ enabled: boolean; stored: number; duplicates: number }> {
      if (!events?.configured) return { enabled: false, stored: 0, duplicates: 0 };
      try {
        const done = await events.publish(input.events.map((e) => ({ ...e, id: input.id, kind: input.kind })));
        return { enabled: true, ...done };
      } catch (err) {
        logger.warn({ err, id: input.id }, 'events could not be published; retried');
        throw ApplicationFailure.retryable(`the event stream could not be reached: ${(err as Error).message}`, 'EventStreamUnavailable');
      }
    },
  };
}
