/** Activity proxies for change plans: per-step time limits, and the lock backoff's arithmetic. */
import { ActivityCancellationType, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { FAILURE } from '../src/core/failure-types';

const NON_RETRYABLE = [FAILURE.LockBusy, FAILURE.ChangeRefused, FAILURE.Superseded, FAILURE.NoPrimaryKey, FAILURE.SchemaChanged];

export const changeActivities = {
  /** A step's statements and builds: as long as the step may take; liveness heartbeats notice a lost worker. */
  forStep(timeoutMs: number) {
    return proxyActivities<Activities>({
      startToCloseTimeout: timeoutMs,
      heartbeatTimeout: '20 seconds',
      cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
      retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 10, nonRetryableErrorTypes: NON_RETRYABLE },
    });
  },
  /** Backfill slices: short calls (tens of seconds), retried from their committed checkpoint. */
  slices: proxyActivities<Activities>({
    startToCloseTimeout: '10 minutes',
    heartbeatTimeout: '20 seconds',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 30, nonRetryableErrorTypes: NON_RETRYABLE },
  }),
  /** Bookkeeping and clean-ups: quick. */
  quick: proxyActivities<Activities>({
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: '20 seconds',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 10 },
  }),
};

/**
 * The wait before lock attempt n+1: 0.5 s doubling up to 30 s, times a jitter in [0.5, 1.5)
 * (`random` in [0, 1), the workflow's deterministic Math.random), so plans waiting on the same
 * table do not retry in step.
 */
export function lockBackoffMs(attempt: number, random: number): number {
  const base = Math.min(30_000, 500 * 2 ** Math.min(attempt - 1, 10));
  return Math.round(base * (0.5 + random));
}
