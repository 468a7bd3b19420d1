/**
 * One member of the worker pool: a Temporal worker on Ferry's task queue with the bundled
 * workflows and the activities built from this process's connections and logger.
 */
import type { Duration } from '@temporalio/common';
import { NativeConnection, Worker, WorkerOptions } from '@temporalio/worker';
import { createActivities, createSwitchWorkerActivities } from '../activities';
import { DEFAULT_ACTIVITY_SLOTS } from '../activities/deps';
import { dataConverterFromEnv } from './codec';
import { connectionOptions, TemporalConfig } from './config';
import { ConnectionRegistry } from './db/connections';
import { EventPublisher, natsConfigured } from './event-stream';
import { streamLimits } from './core/stream-limits';
import { withoutRowData } from './db/errors';
import { cutoverTaskQueue, readyTaskQueue } from './core/names';
import { Logger } from './logger';
import { auditInterceptors, FerryMetrics } from './telemetry';
import { workflowBundle } from './temporal/bundle';

export interface FerryWorkerOptions {
  temporal: TemporalConfig;
  logger: Logger;
  env?: NodeJS.ProcessEnv;
  /** Prebuilt workflow bundle; else FERRY_WORKFLOW_BUNDLE, else the cached build (src/temporal/bundle.ts). */
  workflowBundle?: WorkerOptions['workflowBundle'];
  maxConcurrentActivityTaskExecutions?: number;
  maxConcurrentWorkflowTaskExecutions?: number;
  /** Worker-wide activity rate cap (activities per second). */
  maxActivitiesPerSecond?: number;
  /** Server-side cap across every worker of the task queue. */
  maxTaskQueueActivitiesPerSecond?: number;
  shutdownGraceTime?: Duration;
  identity?: string;
  /** More Temporal worker interceptors (fault injection in tests); the audit interceptor is always on. */
  interceptors?: WorkerOptions['interceptors'];
  /** Ferry's Prometheus metrics: the audit interceptor times activities, the activities count what they did. */
  metrics?: FerryMetrics;
  /**
   * A switch worker: serves this task queue with the cutover's switch activities alone and no
   * workflows (`ferry worker --task-queue`, beside PgBouncer).
   */
  switchQueue?: string;
}

export interface FerryWorker {
  worker: Worker;
  /**
   * Every Temporal worker it runs: `worker`, and but for a switch worker the same activities on
   * the cutover and ready task queues (cutoverTaskQueue, readyTaskQueue) with slots of their own.
   */
  workers: Worker[];
  connections: ConnectionRegistry;
  /** Runs until shutdown; closes the database pools and the Temporal connection afterwards. */
  run(): Promise<void>;
  shutdown(): void;
}


/**
 * Activities that heartbeat their own details, which `ferry status` reads from the pending
 * activity (rows copied, slot lag, the sessions a cutover waits for); the rest get liveness
 * heartbeats. A liveness heartbeat carries no details, and the last heartbeat of a throttle
 * interval is the one the server keeps: mixed in, it would blank what these report.
 */
const REPORTS_PROGRESS = new Set(['copyChunk', 'syncChanges', 'backfillSlice', 'buildChangeIndex', 'copyRewrite', 'streamChanges', 'awaitWriters']);

/**
 * Every other activity heartbeats every 2 s while it runs, so a worker that dies in the middle
 * of a DDL step, a freeze or a long checksum is noticed within the 20 s heartbeat timeout (not
 * a minute or the start-to-close timeout), and cancellation reaches it. A hung statement is
 * bounded by the sessions' statement_timeout instead. Every activity also heartbeats once as it
 * starts, so one stuck from its first statement (waiting for a lock, say) shows a heartbeat of
 * its own attempt in its pending state, not only the previous attempt's.
 */
const livenessHeartbeats: NonNullable<NonNullable<WorkerOptions['interceptors']>['activity']>[number] = (ctx) => ({
  inbound: {
    async execute(input, next) {
      ctx.heartbeat();
      if (REPORTS_PROGRESS.has(ctx.info.activityType)) return next(input);
      const timer = setInterval(() => ctx.heartbeat(), 2_000);
      try {
        return await next(input);
      } finally {
        clearInterval(timer);
      }
    },
  },
});

/**
 * Whatever an activity throws passes here before the audit log and Temporal see it: a
 * PostgreSQL error that escaped asActivityFailure (or sits in a cause chain) is redacted too, so
 * no row value reaches a log line or a history.
 */
const keepRowDataOnWorker: NonNullable<NonNullable<WorkerOptions['interceptors']>['activity']>[number] = (ctx) => ({
  inbound: {
    async execute(input, next) {
      try {
        return await next(input);
      } catch (err) {
        throw withoutRowData(err, ctx.info.activityType);
      }
    },
  },
});

/**
 * Slots of the cutover task queue (cutoverTaskQueue), beside the worker's own: the online
 * cutover's steps inside the write outage run there, one after another but for the drain's
 * groups, which also share the worker's drain budget (activitySlots tables at once). As many as
 * the default activity slots: a group whose tables are all quiet is a few statements, and on 4
 * slots such groups waited for a slot behind groups draining busy tables (at 200 tables with
 * 20 busy, the last group waited 1.4 s).
 */
export const CUTOVER_ACTIVITY_SLOTS = 8;

/**
 * Slots of the ready task queue (readyTaskQueue), beside the worker's own: the sync slices and
 * dirty re-checks of the online tables ready for the cutover run there, so that the copies, keys,
 * validations and index builds of the tables not ready yet never wait behind them. Half the
 * worker's own (4 at the default 8): those slices keep the ready tables' lag down but are not on
 * the way to the approval, and each holds a pair of sessions — with as many as the worker's own,
 * the 300-table soak test's two workers peaked at 69 sessions of the server's 100 (47 with half).
 */
export function readySlots(activitySlots: number): number {
  return Math.max(1, Math.ceil(activitySlots / 2));
}

export const HEARTBEAT_THROTTLE = { maxHeartbeatThrottleInterval: '2 seconds', defaultHeartbeatThrottleInterval: '2 seconds' } as const;

export async function createFerryWorker(options: FerryWorkerOptions): Promise<FerryWorker> {
  const env = options.env ?? process.env;
  // FERRY_CODEC_KEY: encrypt every payload this worker sends (the workflow sandbox never sees
  // the key), failure messages included — the sandbox's bundle then encodes them as payloads.
  const dataConverter = dataConverterFromEnv(env);
  const switchOnly = options.switchQueue !== undefined;
  const bundle = switchOnly ? undefined : (options.workflowBundle ?? workflowBundle(env, { encodeFailures: Boolean(dataConverter?.failureConverterPath) }));
  const activitySlots = options.maxConcurrentActivityTaskExecutions ?? DEFAULT_ACTIVITY_SLOTS;
  // Two more pooled sessions than activity slots: an activity holds at most two of a pool's
  // sessions at once (source and target, which may be the same connection name), so while every
  // running activity holds one and waits for its second, two are still free and no wait is
  // forever. An activity that took a third from the same pool would break that.
  // The cutover and ready queues' slots count: their activities take pooled sessions too.
  const connections = new ConnectionRegistry({
    env,
    poolSize: activitySlots + (switchOnly ? 0 : CUTOVER_ACTIVITY_SLOTS + readySlots(activitySlots)) + 2,
    applicationName: 'ferry-worker',
  });
  // The event streams' limits, checked before the worker takes work: a bad one refuses to start.
  if (natsConfigured(env)) streamLimits(env);
  const events = new EventPublisher(env);
  const connection = await NativeConnection.connect(connectionOptions(options.temporal));
  const workerOptions: WorkerOptions = {
    connection,
    namespace: options.temporal.namespace,
    taskQueue: options.switchQueue ?? options.temporal.taskQueue,
    ...(bundle ? { workflowBundle: bundle } : {}),
    activities: switchOnly
      ? createSwitchWorkerActivities({ connections, logger: options.logger, env })
      : createActivities({ connections, logger: options.logger, env, metrics: options.metrics, events, activitySlots }),
    maxConcurrentActivityTaskExecutions: activitySlots,
    maxConcurrentWorkflowTaskExecutions: options.maxConcurrentWorkflowTaskExecutions ?? 40,
    shutdownGraceTime: options.shutdownGraceTime ?? '30 seconds',
    // Cancellation reaches an activity only with a heartbeat's reply: send them often enough
    // that cancel, pause and a lost worker are noticed within a couple of seconds.
    ...HEARTBEAT_THROTTLE,
  };
  // The native worker refuses explicit undefined for optional settings.
  if (options.maxActivitiesPerSecond) workerOptions.maxActivitiesPerSecond = options.maxActivitiesPerSecond;
  if (options.maxTaskQueueActivitiesPerSecond) {
    workerOptions.maxTaskQueueActivitiesPerSecond = options.maxTaskQueueActivitiesPerSecond;
  }
  if (options.identity) workerOptions.identity = options.identity;
  const audit = auditInterceptors(options.logger, options.metrics);
  workerOptions.interceptors = {
    ...options.interceptors,
    // The first is outermost: the audit line logs the error as keepRowDataOnWorker left it.
    activity: [...(audit.activity ?? []), keepRowDataOnWorker, livenessHeartbeats, ...(options.interceptors?.activity ?? [])],
  };
  if (dataConverter) workerOptions.dataConverter = dataConverter;
  let workers: Worker[];
  try {
    workers = await createWorkers(workerOptions, switchOnly ? undefined : options.temporal.taskQueue, activitySlots);
  } catch (err) {
    await connection.close();
    await connections.close();
    throw err;
  }
  return runningTogether(workers, connections, () => Promise.all([events.close(), connection.close()]));
}

/** The worker on its queue and, with `besideQueue` (all but a switch worker), on that queue's cutover and ready queues. */
async function createWorkers(options: WorkerOptions, besideQueue: string | undefined, activitySlots: number): Promise<Worker[]> {
  const workers: Worker[] = [];
  try {
    workers.push(await Worker.create(options));
    if (besideQueue !== undefined) {
      workers.push(await Worker.create(besideOptions(options, cutoverTaskQueue(besideQueue), CUTOVER_ACTIVITY_SLOTS)));
      workers.push(await Worker.create(besideOptions(options, readyTaskQueue(besideQueue), readySlots(activitySlots))));
    }
    return workers;
  } catch (err) {
    // A Worker made but never run keeps its hold on the connection (closing it would throw
    // instead of the cause), and the SDK releases it only at the end of a run: run the ones
    // made down at once. A task they were handed in that moment ends as at any shutdown.
    await Promise.allSettled(workers.map((w) => w.runUntil(Promise.resolve())));
    throw err;
  }
}

/** The worker on its queue and, but for a switch worker, on the cutover and ready queues: run, and shut down, together. */
function runningTogether(workers: Worker[], connections: ConnectionRegistry, close: () => Promise<unknown>): FerryWorker {
  const shutdown = () => {
    for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
  };
  return {
    worker: workers[0],
    workers,
    connections,
    async run() {
      try {
        // One ending (a shutdown, a fatal error) ends the other; the first failure is the run's.
        const runs = await Promise.allSettled(workers.map((w) => w.run().finally(shutdown)));
        const failed = runs.find((r): r is PromiseRejectedResult => r.status === 'rejected');
        if (failed) throw failed.reason;
      } finally {
        await connections.close();
        await close();
      }
    },
    shutdown,
  };
}

/** The worker's activities alone, on a queue beside its own (the cutover's, the ready tables'), with `slots` slots. */
function besideOptions(options: WorkerOptions, taskQueue: string, slots: number): WorkerOptions {
  const beside: WorkerOptions = { ...options, taskQueue, maxConcurrentActivityTaskExecutions: slots };
  // No workflows there, and the queue's server-side rate cap is the main queue's alone.
  delete beside.workflowBundle;
  delete beside.maxConcurrentWorkflowTaskExecutions;
  delete beside.maxTaskQueueActivitiesPerSecond;
  return beside;
}
