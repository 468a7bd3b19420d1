/** Reading Temporal failure chains (activity → child → workflow). Pure module. */
import { ApplicationFailure } from '@temporalio/common';

/** The innermost ApplicationFailure in an error's cause chain: the one that says what went wrong. */
export function innermostApplicationFailure(err: unknown): ApplicationFailure | undefined {
  let found: ApplicationFailure | undefined;
  let e = err as { cause?: unknown } | undefined;
  while (e) {
    if (e instanceof ApplicationFailure) found = e;
    e = e.cause as typeof e;
  }
  return found;
}

/** The message at the bottom of the cause chain. */
export function rootMessage(err: unknown): string {
  let e = err as { message?: string; cause?: unknown } | undefined;
  while (e?.cause) e = e.cause as typeof e;
  return e?.message ?? String(err);
}

/**
 * What a preflight helper workflow returns when preflight refuses (its executions since patch
 * `preflight-refusal-as-result`): the refusal as the workflow's result, so it completes instead of
 * showing as a red Failed workflow in the Web UI's list; the client turns it into RefusedError
 * (exit 2) with the same message.
 */
export interface PreflightRefusal {
  refused: { message: string; type: string };
}

export function isPreflightRefusal(value: unknown): value is PreflightRefusal {
  const refused = (value as { refused?: { message?: unknown; type?: unknown } } | null)?.refused;
  return typeof refused?.message === 'string' && typeof refused.type === 'string';
}

/** The refusal in an error from preflight: its innermost non-retryable ApplicationFailure, if any. */
export function preflightRefusal(err: unknown, fallbackType: string): PreflightRefusal | undefined {
  const failure = innermostApplicationFailure(err);
  if (!failure?.nonRetryable) return undefined;
  return { refused: { message: failure.message, type: failure.type ?? fallbackType } };
}

export { PostgresUnreachableError } from './errors';
