/**
 * publishEvents: a burst of one run's events onto the NATS JetStream stream (src/event-stream.ts),
 * in order, each with its message id `<id>:<seq>` so that a retried publish is stored once. A
 * worker without FERRY_NATS_URL answers `enabled: false` and the run publishes no more; a stream
 * that cannot be reached fails the attempt, and Temporal retries it until it can.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { EventKind, RunEvent } from '../src/core/event-subjects';
import { approvalMessages, ControlMessage } from '../src/event-stream';
import { verify } from '../src/signature';
import { checkedAudit, type Audit } from '../src/core/status';
import { FAILURE } from '../src/core/failure-types';
import { secretValue } from './callback-target';
import { ActivityDeps } from './deps';

export interface AwaitApprovalInput {
  migrationId: string;
  /** The FERRY_SECRET_* variable whose key signs approval messages. */
  secret: string;
  /** The control stream's sequence of the last message already read (0: none). */
  afterSeq: number;
  sliceMs: number;
}

export interface AwaitApprovalResult {
  lastSeq: number;
  /** The first message whose signature verified: who approved and why. */
  approved?: Audit;
  /** The message refused (at most one a call): why, and whom it claimed to come from. */
  refused: { why: string; actor?: string }[];
}

/** How far a signature's time may be from the worker's clock: an older message is a replay. */
const SIGNATURE_SKEW_S = 300;

/** An approval message checked: its audit when signed with the key and recent, else why not. */
function checkedApproval(message: ControlMessage, key: string): { audit: Audit } | { why: string; actor?: string } {
  let claimed: Audit = {};
  try {
    claimed = checkedAudit(JSON.parse(message.body));
  } catch {
    return { why: 'its body is not JSON' };
  }
  const actor = claimed.actor ? { actor: claimed.actor } : {};
  if (!message.signature || !verify(key, message.signature, message.body)) return { why: 'its X-Ferry-Signature does not verify with the key of cutover.approvalSecret', ...actor };
  const at = Number(/^t=(\d+),/.exec(message.signature)?.[1]);
  if (Math.abs(Date.now() / 1000 - at) > SIGNATURE_SKEW_S) return { why: `its signature is from ${new Date(at * 1000).toISOString()}, more than ${SIGNATURE_SKEW_S} s from now (a replay?)`, ...actor };
  return { audit: claimed };
}

export interface PublishEventsInput {
  kind: EventKind;
  id: string;
  events: RunEvent[];
}

export function createEventActivities({ events, logger, env }: Pick<ActivityDeps, 'events' | 'logger' | 'env'>) {
  return {
    /**
     * cutover.approval: event — reads the run's approval messages (ferry.control.<id>.approve on
     * the stream FERRY_CONTROL) for a slice: returns at the first message that verifies, at the
     * first that is refused, or at the slice's end; the workflow calls again from where this one
     * stopped.
     */
    async awaitApproval(input: AwaitApprovalInput): Promise<AwaitApprovalResult> {
      if (!events?.configured) {
        throw ApplicationFailure.nonRetryable('cutover.approval: event needs the workers to reach NATS: set FERRY_NATS_URL on them', FAILURE.Refused);
      }
      const key = secretValue(env, input.secret, 'cutover.approvalSecret');
      const nc = await events.ready();
      const result: AwaitApprovalResult = { lastSeq: input.afterSeq, refused: [] };
      const until = Date.now() + input.sliceMs;
      for await (const message of approvalMessages(nc, input.migrationId, input.afterSeq, until, Context.current().cancellationSignal)) {
        result.lastSeq = message.seq;
        const checked = checkedApproval(message, key);
        if ('audit' in checked) return { ...result, approved: checked.audit };
        // Told at once, so the refusal is on record while the run waits on.
        return { ...result, refused: [checked] };
      }
      return result;
    },

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
