/**
 * Activity proxies with their timeouts and retry policies, by kind of work, built from a run's
 * timings (src/core/timings.ts): a migration makes its set once (`migrationActivities`) and its
 * chains call through it; the table workflows make theirs the same way (`tableActivities`).
 * Workflows that take no timings use the production set (`checks`).
 */
import { ActivityCancellationType, ActivityOptions, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { FAILURE } from '../src/core/failure-types';
import { PRODUCTION_TIMINGS, Timings } from '../src/core/timings';

/** What every heartbeating kind shares: the heartbeat timeout, and waiting for a cancellation to be acknowledged. */
function heartbeating(timings: Timings, options: Omit<ActivityOptions, 'heartbeatTimeout' | 'cancellationType'>): ActivityOptions {
  return { ...options, heartbeatTimeout: timings.heartbeatTimeoutMs, cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED };
}

export function migrationActivities(timings: Timings) {
  return {
    /** Database steps: DDL, capture, freeze, finalize. Retried with backoff; heartbeats for long DDL. */
    steps: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '30 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
      }),
    ),
    /** The final drain and checks at cutover: short slices, heartbeats per round. */
    drain: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '10 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 50 },
      }),
    ),
    /** Preflight: a refusal is final, a flaky connection gets a few tries. */
    checks: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '5 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 3 },
      }),
    ),
    notify: notifyActivities(timings),
    /**
     * The cutover's source steps: the freeze flip and the wait for writers, in slices of seconds
     * that report who blocks. Heartbeats notice a lost worker in seconds.
     */
    cutoverSteps: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '2 minutes',
        retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 30 },
      }),
    ),
    /**
     * After the point of no return: removing what Ferry left on the source is best effort. A few
     * quick attempts here; what remains is retried in the background (cleanupWorkflow).
     */
    release: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '2 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 3 },
      }),
    ),
    /**
     * Logical capture's consumer: a slice of minutes, heartbeating; retried without end while the
     * migration runs (a lost slot fails it non-retryably).
     */
    stream: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '10 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds' },
      }),
    ),
  };
}

export type MigrationActivities = ReturnType<typeof migrationActivities>;

/** Callbacks: short POSTs, retried on 5xx, 429 and network errors as the timings say; other refusals are final. */
export function notifyActivities(timings: Timings) {
  const { initialIntervalMs, maximumIntervalMs, maximumAttempts } = timings.callbackRetry;
  return proxyActivities<Activities>({
    startToCloseTimeout: '30 seconds',
    retry: {
      initialInterval: initialIntervalMs,
      backoffCoefficient: 2,
      maximumInterval: maximumIntervalMs,
      maximumAttempts,
      nonRetryableErrorTypes: [FAILURE.CallbackRejected, FAILURE.CallbackSecretMissing, FAILURE.CallbackSecretRefused, FAILURE.CallbackTargetRefused],
    },
  });
}

/** A table workflow's activities: its slices of copy and sync, its checks, its keys and indexes. */
export function tableActivities(timings: Timings) {
  return {
    copy: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '10 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 50 },
      }),
    ),
    check: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '2 hours',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
      }),
    ),
    /** Keys, indexes and ANALYZE: an index on a large table can take hours; liveness heartbeats notice a lost worker. */
    build: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '24 hours',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
      }),
    ),
  };
}

/** Preflight of workflows that take no timings (the preflight helpers, change plans). */
export const { checks } = migrationActivities(PRODUCTION_TIMINGS);
