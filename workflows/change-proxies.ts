/** Activity proxies for change plans: per-step time limits, and the lock backoff's arithmetic. */
import { ActivityCancellationType, ApplicationFailure, proxyActivities, sleep } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { FAILURE } from '../src/core/failure-types';
import { innermostApplicationFailure } from '../src/core/failures';
import { PRODUCTION_TIMINGS, Timings } from '../src/core/timings';

const NON_RETRYABLE = [FAILURE.LockBusy, FAILURE.ChangeRefused, FAILURE.Superseded, FAILURE.NoPrimaryKey, FAILURE.SchemaChanged];

/** A plan's activities, as its timings configure them (the heartbeat timeout: how soon a lost worker's call is retried). */
export function changeActivitiesFor(timings: Timings) {
  const heartbeatTimeout = timings.heartbeatTimeoutMs;
  const cancellationType = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED;
  return {
    /** A step's statements and builds: as long as the step may take; liveness heartbeats notice a lost worker. */
    forStep(timeoutMs: number) {
      return proxyActivities<Activities>({
        startToCloseTimeout: timeoutMs,
        heartbeatTimeout,
        cancellationType,
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 10, nonRetryableErrorTypes: NON_RETRYABLE },
      });
    },
    /** Backfill slices: short calls (tens of seconds), retried from their committed checkpoint. */
    slices: proxyActivities<Activities>({
      startToCloseTimeout: '10 minutes',
      heartbeatTimeout,
      cancellationType,
      retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 30, nonRetryableErrorTypes: NON_RETRYABLE },
    }),
    /** Bookkeeping and clean-ups: quick. */
    quick: proxyActivities<Activities>({
      startToCloseTimeout: '5 minutes',
      heartbeatTimeout,
      cancellationType,
      retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 10 },
    }),
  };
}

export type ChangeActivities = ReturnType<typeof changeActivitiesFor>;

/** Workflows that take no timings (a rewrite's retirement) use production's. */
export const changeActivities = changeActivitiesFor(PRODUCTION_TIMINGS);

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
