/** Activity proxies with their timeouts and retry policies, shared by the parent's chains. */
import { ActivityCancellationType, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { FAILURE } from '../src/core/failure-types';

/** Database steps: DDL, capture, freeze, finalize. Retried with backoff; heartbeats for long DDL. */
export const steps = proxyActivities<Activities>({
  startToCloseTimeout: '30 minutes',
  // Workers send liveness heartbeats every 2 s (src/worker.ts): a lost worker costs seconds.
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

/** The final drain and checks at cutover: short slices, heartbeats per round. */
export const drain = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 50 },
});

/** Preflight: a refusal is final, a flaky connection gets a few tries. */
export const checks = proxyActivities<Activities>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 3 },
});

export const notify = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '1 minute',
    maximumAttempts: 8,
    nonRetryableErrorTypes: [FAILURE.CallbackRejected, FAILURE.CallbackSecretMissing, FAILURE.CallbackSecretRefused, FAILURE.CallbackTargetRefused],
  },
});

/**
 * The cutover's source steps: the freeze flip and the wait for writers, in slices of seconds
 * that report who blocks. Heartbeats notice a lost worker in seconds.
 */
export const cutoverSteps = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 30 },
});

/**
 * After the point of no return: removing what Ferry left on the source is best effort. A few
 * quick attempts here; what remains is retried in the background (cleanupWorkflow).
 */
export const release = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 3 },
});

/**
 * Logical capture's consumer: a slice of minutes, heartbeating; retried without end while the
 * migration runs (a lost slot fails it non-retryably).
 */
export const stream = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds' },
});
