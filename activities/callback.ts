/**
 * sendCallback: POSTs the result document (or one event) to the spec's callback URL, signed
 * with HMAC-SHA256 when a secret is configured. 5xx, 429 and network errors throw a retryable
 * error (Temporal's RetryPolicy backs off); any other 4xx is final. The secret is an
 * environment variable name resolved here, on the worker.
 */
import { createHmac } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { ActivityDeps } from './deps';

export interface CallbackInput {
  url: string;
  /** Name of the worker environment variable holding the HMAC secret. */
  secret?: string;
  idempotencyKey: string;
  body: unknown;
}

export function signature(secret: string, timestamp: number, body: string): string {
  const mac = createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
  return `t=${timestamp},v1=${mac}`;
}

export function createSendCallback({ env }: Pick<ActivityDeps, 'env'>) {
  return async function sendCallback(input: CallbackInput): Promise<{ status: number }> {
    const body = JSON.stringify(input.body);
    const headers: Record<string, string> = {
      'Content-Type': 'application/json',
      'Idempotency-Key': input.idempotencyKey,
      'User-Agent': 'ferry',
    };
    if (input.secret) {
      const secret = env[input.secret];
      if (!secret) {
        throw ApplicationFailure.nonRetryable(
          `callback secret variable ${input.secret} is not set on the workers: set it, or remove callback.secret`,
          'CallbackSecretMissing',
        );
      }
      headers['X-Ferry-Signature'] = signature(secret, Math.floor(Date.now() / 1000), body);
    }
    const response = await fetch(input.url, { method: 'POST', headers, body, signal: AbortSignal.timeout(15_000) });
    await response.arrayBuffer().catch(() => undefined);
    if (response.ok) return { status: response.status };
    const message = `callback ${new URL(input.url).host} answered HTTP ${response.status}`;
    if (response.status >= 500 || response.status === 429) throw ApplicationFailure.retryable(message, 'CallbackRetryable');
    throw ApplicationFailure.nonRetryable(message, 'CallbackRejected');
  };
}
