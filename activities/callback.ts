/**
 * sendCallback: POSTs the result document (or one event) to the spec's callback URL, signed
 * with HMAC-SHA256 when a secret is configured. 5xx, 429 and network errors throw a retryable
 * error (Temporal's RetryPolicy backs off); any other 4xx and every redirect are final. The
 * secret is the name of a FERRY_SECRET_* variable, resolved here, on the worker; the target must
 * pass callback-target.ts.
 *
 * What goes back into the result and the histories says what happened, never where: no resolved
 * address, port or system error, so a spec cannot use the workers to map the network behind
 * them. The worker's own log keeps the detail.
 */
import { ApplicationFailure } from '@temporalio/common';
import { sign } from '../src/signature';
import { allowsPrivate, checkTarget, post, Resolve, resolveAll, secretValue } from './callback-target';
import { ActivityDeps } from './deps';
import { FAILURE } from '../src/core/failure-types';

export interface CallbackInput {
  url: string;
  /** Name of the worker environment variable holding the HMAC secret (FERRY_SECRET_*). */
  secret?: string;
  idempotencyKey: string;
  body: unknown;
}

export { sign as signature } from '../src/signature';

/** Result callbacks carry the migration id as idempotency key, events `<id>:<seq>`. */
function callbackKind(input: CallbackInput): 'event' | 'result' {
  return input.idempotencyKey.includes(':') ? 'event' : 'result';
}

export function createSendCallback({ env, logger, metrics, resolve = resolveAll }: Pick<ActivityDeps, 'env' | 'logger' | 'metrics'> & { resolve?: Resolve }) {
  /** One delivery, counted by its outcome (ferry_callbacks_total). */
  return async function sendCallback(input: CallbackInput): Promise<{ status: number }> {
    try {
      const delivered = await deliver(input);
      metrics?.callbacks.inc({ kind: callbackKind(input), outcome: 'delivered' });
      return delivered;
    } catch (err) {
      const rejected = (err as { type?: string }).type === FAILURE.CallbackRejected;
      metrics?.callbacks.inc({ kind: callbackKind(input), outcome: rejected ? 'rejected' : 'failed' });
      throw err;
    }
  };

  async function deliver(input: CallbackInput): Promise<{ status: number }> {
    const body = JSON.stringify(input.body);
    const headers: Record<string, string> = {
      'Content-Type': 'application/json',
      'Idempotency-Key': input.idempotencyKey,
      'User-Agent': 'ferry',
    };
    if (input.secret) headers['X-Ferry-Signature'] = sign(secretValue(env, input.secret), Math.floor(Date.now() / 1000), body);
    let status: number;
    try {
      const target = await checkTarget(new URL(input.url), { allowPrivate: allowsPrivate(env), resolve });
      status = await post(target, headers, body);
    } catch (err) {
      if (err instanceof ApplicationFailure) throw err;
      logger.warn({ err, url: input.url, idempotencyKey: input.idempotencyKey }, 'callback delivery failed');
      throw ApplicationFailure.retryable('callback delivery failed (network error)', FAILURE.CallbackRetryable);
    }
    if (status >= 200 && status < 300) return { status };
    const message = `callback answered HTTP ${status}`;
    if (status >= 300 && status < 400) {
      throw ApplicationFailure.nonRetryable(`${message}, a redirect: Ferry does not follow redirects; set callback.url to the final address`, FAILURE.CallbackRejected);
    }
    if (status >= 500 || status === 429) throw ApplicationFailure.retryable(message, FAILURE.CallbackRetryable);
    throw ApplicationFailure.nonRetryable(message, FAILURE.CallbackRejected);
  }
}
