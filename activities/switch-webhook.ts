/**
 * The switch by webhook (cutover.switch: webhook): for a switcher Ferry does not drive itself
 * (DNS, a service mesh, a Kubernetes secret), a signed POST at each stage of the cutover —
 * `paused` before the freeze, `switched` once the target is ready and before the point of no
 * return, `reverted` when a cutover that had sent `paused` rolls back — answered 2xx when the
 * switcher has done its part. Signed as the result callback is (X-Ferry-Signature), and sent only
 * to addresses the callback may reach (callback-target.ts). Anything but 2xx is a refusal: the
 * cutover rolls back. Network errors are retried until the stage's timeout (the activity's
 * schedule-to-close), which then rolls back too.
 */
import { ApplicationFailure } from '@temporalio/common';
import { sign } from '../src/signature';
import { FAILURE } from '../src/core/failure-types';
import { allowsPrivate, checkTarget, post, Resolve, resolveAll, secretValue } from './callback-target';
import { ActivityDeps } from './deps';

export type SwitchStage = 'paused' | 'switched' | 'reverted';

export interface SwitchHookInput {
  migrationId: string;
  url: string;
  secret: string;
  stage: SwitchStage;
  timeoutMs: number;
  /** What the switcher may want besides the stage: the source and target connection names. */
  detail: Record<string, unknown>;
}

export function createSwitchHook({ env, logger, resolve = resolveAll }: Pick<ActivityDeps, 'env' | 'logger'> & { resolve?: Resolve }) {
  return async function switchHook(input: SwitchHookInput): Promise<{ status: number; at: string }> {
    const body = JSON.stringify({ id: input.migrationId, stage: input.stage, at: new Date().toISOString(), ...input.detail });
    const headers: Record<string, string> = {
      'Content-Type': 'application/json',
      'Idempotency-Key': `${input.migrationId}:switch:${input.stage}`,
      'User-Agent': 'ferry',
      'X-Ferry-Signature': sign(secretValue(env, input.secret, 'cutover.switch.webhook.secret'), Math.floor(Date.now() / 1000), body),
    };
    let status: number;
    try {
      const target = await checkTarget(new URL(input.url), { allowPrivate: allowsPrivate(env), resolve });
      status = await post(target, headers, body, input.timeoutMs);
    } catch (err) {
      if (err instanceof ApplicationFailure) throw err;
      logger.warn({ err, migrationId: input.migrationId, stage: input.stage }, 'switch webhook delivery failed');
      throw ApplicationFailure.retryable(`the switch webhook could not be reached at ${input.stage} (network error or no answer)`, FAILURE.CallbackRetryable);
    }
    if (status < 200 || status >= 300) {
      throw ApplicationFailure.nonRetryable(
        `the switch webhook answered HTTP ${status} at ${input.stage}: the switcher refused; the cutover rolls back`,
        FAILURE.CallbackRejected,
      );
    }
    return { status, at: new Date().toISOString() };
  };
}
