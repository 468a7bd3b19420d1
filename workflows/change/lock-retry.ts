/** The lock backoff of change plans: a lock-bound call tried again, with jitter, until its maxWait. */
import { ApplicationFailure, sleep } from '@temporalio/workflow';
import { FAILURE } from '../../src/core/failure-types';
import { innermostApplicationFailure } from '../../src/core/failures';

/**
 * The wait before lock attempt n+1: 0.5 s doubling up to 30 s, times a jitter in [0.5, 1.5)
 * (`random` in [0, 1), the workflow's deterministic Math.random), so plans waiting on the same
 * table do not retry in step.
 */
export function lockBackoffMs(attempt: number, random: number): number {
  const base = Math.min(30_000, 500 * 2 ** Math.min(attempt - 1, 10));
  return Math.round(base * (0.5 + random));
}

export interface LockRetry {
  /** Names the lock in the failure: "step 3: the lock", "step 2: the swap's lock". */
  what: string;
  maxWaitMs: number;
  /** Before each attempt (n from 1). */
  onAttempt?: (n: number) => void;
  /** While waiting for the next attempt: true before the wait, false after `between`. */
  onWaiting?: (n: number, waiting: boolean) => void;
  /** After the wait, before the next attempt (a rewrite catches up its log). */
  between?: () => Promise<void>;
}

/**
 * A lock-bound call: each attempt waits at most its own lock_timeout and fails with LockBusy
 * when the lock is busy; it is tried again after a backoff with jitter (a workflow timer), until
 * `maxWaitMs` has passed since the first attempt, then LockWaitExceeded. Other failures pass.
 */
export async function retryWhileLockBusy<T>(retry: LockRetry, attempt: () => Promise<T>): Promise<T> {
  const started = Date.now();
  for (let n = 1; ; n += 1) {
    retry.onAttempt?.(n);
    try {
      return await attempt();
    } catch (err) {
      const busy = innermostApplicationFailure(err);
      if (busy?.type !== FAILURE.LockBusy) throw err;
      const waited = Date.now() - started;
      if (waited >= retry.maxWaitMs) {
        // The last attempt's words in the message, not as a cause: the innermost failure is what
        // a result reports, and it must say that the wait ran out, not that an attempt was busy.
        throw ApplicationFailure.create({
          message: `${retry.what} stayed busy for ${Math.round(waited / 1000)}s over ${n} attempts (maxWait ${retry.maxWaitMs / 1000}s); the last attempt: ${busy.message}`,
          type: FAILURE.LockWaitExceeded,
          nonRetryable: true,
        });
      }
      retry.onWaiting?.(n, true);
      await sleep(Math.min(lockBackoffMs(n, Math.random()), retry.maxWaitMs - waited));
      await retry.between?.();
      retry.onWaiting?.(n, false);
    }
  }
}
