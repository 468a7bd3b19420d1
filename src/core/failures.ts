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

export { PostgresUnreachableError } from './errors';
