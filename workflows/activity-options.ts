/**
 * Every activity's options — timeouts, heartbeats, retry policies — by kind of work, in this one
 * module, built from a run's timings (src/core/timings.ts): a migration makes its set once
 * (`migrationActivities`) and its chains call through it; the table workflows make theirs the same
 * way (`tableActivities`), a change plan its own (`changeActivitiesFor`). Workflows that take no
 * timings (the helpers, a rewrite's retirement, clean-ups) use production's.
 *
 * The heartbeat timeout is the timings' (production 20 s): it is right only because every
 * heartbeating activity beats more often than that (the worker throttles a heartbeat to one per
 * 2 s), and it says how soon a lost worker's call is retried.
 */
import { ActivityCancellationType, ActivityInterfaceFor, ActivityOptions, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { FAILURE } from '../src/core/failure-types';
import { cutoverTaskQueue, readyTaskQueue } from '../src/core/names';
import { PRODUCTION_TIMINGS, Timings } from '../src/core/timings';

/** What every heartbeating kind shares: the heartbeat timeout, and waiting for a cancellation to be acknowledged. */
function heartbeating(timings: Timings, options: Omit<ActivityOptions, 'heartbeatTimeout' | 'cancellationType'>): ActivityOptions {
  return { ...options, heartbeatTimeout: timings.heartbeatTimeoutMs, cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED };
}

/** A migration's activities; on `taskQueue` when given, else on the workflow's own. */
export function migrationActivities(timings: Timings, taskQueue?: string) {
  const on = (options: Omit<ActivityOptions, 'heartbeatTimeout' | 'cancellationType'>) => heartbeating(timings, { ...options, ...(taskQueue ? { taskQueue } : {}) });
  return {
    /** Database steps: DDL, capture, freeze, finalize. Retried with backoff; heartbeats for long DDL. */
    steps: proxyActivities<Activities>(
      on({
        startToCloseTimeout: '30 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
      }),
    ),
    /** The final drain and checks at cutover: short slices, heartbeats per round. */
    drain: proxyActivities<Activities>(
      on({
        startToCloseTimeout: '10 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 50 },
      }),
    ),
    /** Preflight: a refusal is final, a flaky connection gets a few tries. */
    checks: proxyActivities<Activities>(
      on({
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
      on({
        startToCloseTimeout: '2 minutes',
        retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 30 },
      }),
    ),
    /**
     * After the point of no return: removing what Ferry left on the source is best effort. A few
     * quick attempts here; what remains is retried in the background (cleanupWorkflow).
     */
    release: proxyActivities<Activities>(
      on({
        startToCloseTimeout: '2 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 3 },
      }),
    ),
    /**
     * Logical capture's consumer: a slice of minutes, heartbeating; retried without end while the
     * migration runs (a lost slot fails it non-retryably).
     */
    stream: proxyActivities<Activities>(
      on({
        startToCloseTimeout: '10 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds' },
      }),
    ),
  };
}

export type MigrationActivities = ReturnType<typeof migrationActivities>;

/**
 * The online cutover's steps inside the write outage — the freeze, the wait for writers, the
 * drain, the target's last steps — on the cutover task queue (PATCHES.cutoverQueue), which every
 * worker polls with activity slots of its own: they no longer wait for a slot behind hundreds of
 * tables' sync slices. Only inside a workflow (it reads the workflow's task queue).
 */
export function cutoverActivities(timings: Timings): Pick<MigrationActivities, 'cutoverSteps' | 'drain' | 'steps'> {
  const { cutoverSteps, drain, steps } = migrationActivities(timings, cutoverTaskQueue(workflowInfo().taskQueue));
  return { cutoverSteps, drain, steps };
}

/**
 * The cutover's switch (workflows/migration/switch.ts). PgBouncer's steps go to the queue its
 * switch worker serves: pausing and repointing fail (and the cutover rolls back) when no worker
 * takes them within a minute or PAUSE outwaits cutover.maxWait; resuming — on the target after
 * the point of no return, on the source in a rollback — is retried until a worker does it, as the
 * application's queries are held until then. A webhook's stage has its timeout for every try.
 */
export function poolActivities(timings: Timings, taskQueue: string, maxWaitMs: number) {
  const nonRetryableErrorTypes = [FAILURE.CutoverBlocked, FAILURE.SwitchRefused, FAILURE.UnknownConnection];
  return {
    pool: proxyActivities<Activities>(
      heartbeating(timings, {
        taskQueue,
        scheduleToStartTimeout: '1 minute',
        startToCloseTimeout: maxWaitMs + 60_000,
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '5 seconds', maximumAttempts: 5, nonRetryableErrorTypes },
      }),
    ),
    /** Preflight's look at the pooler: a switch worker must take it soon. */
    check: proxyActivities<Activities>(
      heartbeating(timings, {
        taskQueue,
        scheduleToStartTimeout: '30 seconds',
        startToCloseTimeout: '1 minute',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '5 seconds', maximumAttempts: 3, nonRetryableErrorTypes },
      }),
    ),
    resume: proxyActivities<Activities>(
      heartbeating(timings, {
        taskQueue,
        startToCloseTimeout: '1 minute',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds' },
      }),
    ),
  };
}

/** The webhook switcher's stages: each try and all of them within the stage's timeout. */
export function hookActivities(timeoutMs: number) {
  return proxyActivities<Activities>({
    scheduleToCloseTimeout: timeoutMs,
    startToCloseTimeout: timeoutMs,
    retry: {
      initialInterval: '1 second',
      backoffCoefficient: 2,
      maximumInterval: '5 seconds',
      nonRetryableErrorTypes: [FAILURE.CallbackRejected, FAILURE.CallbackSecretMissing, FAILURE.CallbackSecretRefused, FAILURE.CallbackTargetRefused],
    },
  });
}

/**
 * The event stream's publishes: retried without end (a NATS outage delays events, never loses
 * them), each attempt a few seconds at most.
 */
export function eventStreamActivities(timings: Timings) {
  return proxyActivities<Activities>(
    heartbeating(timings, {
      startToCloseTimeout: '1 minute',
      retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds' },
    }),
  );
}

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
  const copy: ActivityOptions = {
    startToCloseTimeout: '10 minutes',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 50 },
  };
  const check: ActivityOptions = {
    startToCloseTimeout: '2 hours',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
  };
  let ready: { copy: ActivityInterfaceFor<Activities>; check: ActivityInterfaceFor<Activities> } | undefined;
  return {
    copy: proxyActivities<Activities>(heartbeating(timings, copy)),
    check: proxyActivities<Activities>(heartbeating(timings, check)),
    /**
     * A ready table's sync slices and re-checks (PATCHES.readyQueue): as copy and check, on the
     * ready task queue, out of the way of the tables not ready yet. Made on first use: the
     * queue's name is read from the workflow, which only then is sure to be running.
     */
    ready() {
      if (!ready) {
        const onReadyQueue = { taskQueue: readyTaskQueue(workflowInfo().taskQueue) };
        ready = {
          copy: proxyActivities<Activities>(heartbeating(timings, { ...copy, ...onReadyQueue })),
          check: proxyActivities<Activities>(heartbeating(timings, { ...check, ...onReadyQueue })),
        };
      }
      return ready;
    },
    /** Keys, indexes and ANALYZE: an index on a large table can take hours; liveness heartbeats notice a lost worker. */
    build: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '24 hours',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
      }),
    ),
  };
}

const NON_RETRYABLE = [FAILURE.LockBusy, FAILURE.ChangeRefused, FAILURE.Superseded, FAILURE.NoPrimaryKey, FAILURE.SchemaChanged];

/** A plan's activities, as its timings configure them (the heartbeat timeout: how soon a lost worker's call is retried). */
export function changeActivitiesFor(timings: Timings) {
  return {
    /** A step's statements and builds: as long as the step may take; liveness heartbeats notice a lost worker. */
    forStep(timeoutMs: number) {
      return proxyActivities<Activities>(
        heartbeating(timings, {
          startToCloseTimeout: timeoutMs,
          retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 10, nonRetryableErrorTypes: NON_RETRYABLE },
        }),
      );
    },
    /** Backfill slices: short calls (tens of seconds), retried from their committed checkpoint. */
    slices: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '10 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 30, nonRetryableErrorTypes: NON_RETRYABLE },
      }),
    ),
    /** Bookkeeping and clean-ups: quick. */
    quick: proxyActivities<Activities>(
      heartbeating(timings, {
        startToCloseTimeout: '5 minutes',
        retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 10 },
      }),
    ),
  };
}

export type ChangeActivities = ReturnType<typeof changeActivitiesFor>;

/** Workflows that take no timings (a rewrite's retirement) use production's. */
export const changeActivities = changeActivitiesFor(PRODUCTION_TIMINGS);

/** Preflight of workflows that take no timings (the migration preflight helper, change plans). */
export const { checks } = migrationActivities(PRODUCTION_TIMINGS);

/**
 * The short helpers and background clean-ups, which take no timings. They heartbeat (but
 * unfreeze, a single short statement) and are not waited for on cancellation: nothing cancels them
 * but their own end.
 */
export const helperActivities = {
  /** `ferry start`'s preflight helper: preflight heartbeats every 2 s, so a lost worker costs seconds, not 5 minutes. */
  preflight: proxyActivities<Activities>({
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: PRODUCTION_TIMINGS.heartbeatTimeoutMs,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '5 seconds', maximumAttempts: 3 },
  }),
  /** A clean-up's removals: each queues for a lock briefly; the workflow retries what remains with growing pauses. */
  cleanup: proxyActivities<Activities>({
    startToCloseTimeout: '2 minutes',
    heartbeatTimeout: PRODUCTION_TIMINGS.heartbeatTimeoutMs,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 5 },
  }),
  /** `ferry unfreeze`: one statement per table. */
  unfreeze: proxyActivities<Activities>({
    startToCloseTimeout: '2 minutes',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 10 },
  }),
};
