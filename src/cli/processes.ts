/** `ferry server` (embedded Temporal dev server) and `ferry worker` (one pool member). */
import { NATS_URL_ENV } from '../core/event-subjects';
import { streamLimits } from '../core/stream-limits';
import { Command, InvalidArgumentError } from 'commander';
import { temporalConfig, WORKER_PROCESS_ENV } from '../config';
import { RefusedError } from '../client';
import { duration, httpUrl, positiveInt } from './args';
import { CliExit } from './output';
import { FAILURE } from '../core/failure-types';

function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
}

export function registerProcessCommands(program: Command): void {
  program
    .command('server')
    .description('run the Temporal dev server in the foreground, with Ferry\'s search attributes and the Web UI')
    .option('--port <port>', 'frontend gRPC port', positiveInt, 7233)
    .option('--ui-port <port>', 'Web UI port', positiveInt, 8233)
    .option('--db-file <path>', 'persist to this SQLite file (in memory otherwise)')
    .option('--headless', 'no Web UI')
    .option('--codec-endpoint <url>', 'payload codec endpoint for the Web UI (see `ferry codec-server`)', httpUrl)
    .action(serverCommand);

  program
    .command('demo')
    .description('an online migration of a seeded shop under a live writer, end to end on this machine (docs/getting-started.md)')
    .option('--keep', 'leave the databases, workers and Temporal running until Ctrl-C')
    .option('--rows <n>', 'orders to seed (about 3.3 rows in all per order)', positiveInt, 60_000)
    .option('--pg <url>', 'admin URL of the PostgreSQL server to use (default FERRY_TEST_PG or the local server)')
    .option('--embedded-pg', 'use embedded PostgreSQL even when a server answers')
    .option('--upgrade', 'a major-version upgrade: the source on PostgreSQL 13, the target on 17 (private clusters of npm\'s server builds)')
    .option('--no-pgbouncer', 'the writer connects to the source directly even when PgBouncer is installed (it then meets the freeze)')
    .action(async (opts: { keep?: boolean; rows: number; pg?: string; embeddedPg?: boolean; upgrade?: boolean; pgbouncer: boolean }) => {
      if (opts.upgrade && (opts.pg || opts.embeddedPg)) {
        throw new CliExit('--upgrade starts its own PostgreSQL 13 and 17: leave out --pg and --embedded-pg, or --upgrade', 2);
      }
      const { runDemo } = require('../dev/demo') as typeof import('../dev/demo');
      const code = await runDemo({ keep: opts.keep, orders: opts.rows, pg: opts.pg, embeddedPg: opts.embeddedPg, upgrade: opts.upgrade, pgbouncer: opts.pgbouncer });
      if (code !== 0) throw new CliExit('the demo did not find both sides identical or the callback verified (see above)', code);
    });

  program
    .command('worker')
    .description('run one worker of the pool: executes migrations\' workflows and activities')
    .option('--concurrency <n>', 'activities this worker runs at once (FERRY_WORKER_CONCURRENCY, default 8)', positiveInt)
    .option('--workflow-concurrency <n>', 'workflow tasks this worker runs at once (FERRY_WORKFLOW_CONCURRENCY, default 40)', positiveInt)
    .option('--max-activities-per-second <n>', 'rate cap for this worker (FERRY_MAX_ACTIVITIES_PER_SECOND)', positiveInt)
    .option('--task-queue-activities-per-second <n>', 'server-side rate cap across all workers of the queue (FERRY_TASK_QUEUE_ACTIVITIES_PER_SECOND)', positiveInt)
    .option('--shutdown-grace <duration>', 'how long SIGTERM waits for in-flight activities (FERRY_SHUTDOWN_GRACE, default 30s)', duration)
    .option('--metrics-port <port>', 'serve /metrics, /healthz and /readyz on this port (FERRY_METRICS_PORT)', positiveInt)
    .option('--identity <name>', 'worker identity shown in Temporal')
    .option(
      '--task-queue <queue>',
      "serve only the cutover's switch on this queue (cutover.switch.pgbouncer.taskQueue): run it beside PgBouncer, with FERRY_CONN_<NAME> for its admin console and the target",
      taskQueueName,
    )
    .action(workerCommand);
}

interface WorkerFlags {
  concurrency?: number;
  workflowConcurrency?: number;
  maxActivitiesPerSecond?: number;
  taskQueueActivitiesPerSecond?: number;
  shutdownGrace?: number;
  metricsPort?: number;
  identity?: string;
  taskQueue?: string;
}

/** The queue a switch worker serves: the spec's rule for cutover.switch.pgbouncer.taskQueue. */
function taskQueueName(value: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/.test(value)) {
    throw new InvalidArgumentError('must be 1-200 letters, digits, ".", "_" or "-", starting with a letter or digit (the queue cutover.switch.pgbouncer.taskQueue names)');
  }
  return value;
}

/** Flags win over the environment (FERRY_*), which wins over the defaults: one place for both. */
export function workerSettings(flags: WorkerFlags, env: NodeJS.ProcessEnv): Omit<WorkerFlags, 'identity' | 'taskQueue'> & { shutdownGrace: number } {
  const fromEnv = (name: string, parse: (v: string) => number): number | undefined => {
    const raw = env[name];
    if (raw === undefined || raw === '') return undefined;
    try {
      return parse(raw);
    } catch (err) {
      throw new RefusedError(`${name}=${raw} ${(err as Error).message}: fix or unset it`, FAILURE.InvalidEnvironment);
    }
  };
  // The event streams' limits, before anything starts that would keep the process up.
  if (env[NATS_URL_ENV]) streamLimits(env);
  return {
    concurrency: flags.concurrency ?? fromEnv('FERRY_WORKER_CONCURRENCY', positiveInt),
    workflowConcurrency: flags.workflowConcurrency ?? fromEnv('FERRY_WORKFLOW_CONCURRENCY', positiveInt),
    maxActivitiesPerSecond: flags.maxActivitiesPerSecond ?? fromEnv('FERRY_MAX_ACTIVITIES_PER_SECOND', positiveInt),
    taskQueueActivitiesPerSecond: flags.taskQueueActivitiesPerSecond ?? fromEnv('FERRY_TASK_QUEUE_ACTIVITIES_PER_SECOND', positiveInt),
    shutdownGrace: flags.shutdownGrace ?? fromEnv('FERRY_SHUTDOWN_GRACE', duration) ?? 30_000,
    metricsPort: flags.metricsPort ?? fromEnv('FERRY_METRICS_PORT', positiveInt),
  };
}

/** `ferry server`: the dev server in the foreground until SIGINT or SIGTERM (or until it exits). */
async function serverCommand(opts: { port: number; uiPort: number; dbFile?: string; headless?: boolean; codecEndpoint?: string }): Promise<void> {
  // Loaded on demand: the worker SDK and its dependencies make every other verb slower to start.
  const { startDevServer } = require('../dev/dev-server') as typeof import('../dev/dev-server');
  const server = await startDevServer({
    port: opts.port,
    uiPort: opts.uiPort,
    dbFile: opts.dbFile,
    headless: opts.headless,
    codecEndpoint: opts.codecEndpoint,
    logLevel: 'warn',
    inheritOutput: true,
    report: (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(`Temporal dev server on ${server.address}${server.uiUrl ? `, Web UI ${server.uiUrl}` : ''}\n`);
  if (opts.codecEndpoint) {
    process.stdout.write(
      `payload codec endpoint: ${opts.codecEndpoint}${server.uiUrl ? ' (the Web UI decodes through it' : ' (no Web UI'}; the temporal CLI takes --codec-endpoint ${opts.codecEndpoint})\n`,
    );
  }
  process.stdout.write(`workers and clients: TEMPORAL_ADDRESS=${server.address}\n`);
  const reason = await Promise.race([untilSignal(), server.exited.then(() => 'exit' as const)]);
  if (reason !== 'exit') await server.stop();
}

/** `ferry worker`: one worker of the pool, with its metrics endpoint when asked, until SIGINT or SIGTERM. */
async function workerCommand(flags: WorkerFlags): Promise<void> {
  const opts = workerSettings(flags, process.env);
  const { createFerryWorker } = require('../worker') as typeof import('../worker');
  const { createLogger } = require('../logger') as typeof import('../logger');
  const telemetry = require('../telemetry') as typeof import('../telemetry');
  const logger = createLogger({ name: 'ferry-worker' });
  const temporal = temporalConfig();
  const metrics = opts.metricsPort ? telemetry.createMetrics() : undefined;
  const sdkMetricsUrl = await telemetry.installRuntime({ logger, metrics: Boolean(metrics) });
  const worker = await createFerryWorker({
    temporal,
    logger,
    metrics,
    maxConcurrentActivityTaskExecutions: opts.concurrency,
    maxConcurrentWorkflowTaskExecutions: opts.workflowConcurrency,
    maxActivitiesPerSecond: opts.maxActivitiesPerSecond,
    maxTaskQueueActivitiesPerSecond: opts.taskQueueActivitiesPerSecond,
    shutdownGraceTime: opts.shutdownGrace,
    identity: flags.identity,
    ...(flags.taskQueue ? { switchQueue: flags.taskQueue } : {}),
  });
  const http =
    metrics && opts.metricsPort
      ? await telemetry.serveTelemetry({
          port: opts.metricsPort,
          metrics,
          sdkMetricsUrl,
          // Both Temporal workers: on the queue, and on the cutover queue beside it.
          ready: () => worker.workers.every((w) => w.getState() === 'RUNNING'),
          live: () => worker.workers.every((w) => w.getState() !== 'FAILED'),
        })
      : undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'shutting down: finishing or checkpointing in-flight work');
    worker.shutdown();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  logger.info(
    { address: temporal.address, namespace: temporal.namespace, taskQueue: flags.taskQueue ?? temporal.taskQueue, ...(flags.taskQueue ? { serves: 'switch' } : {}), ...opts },
    'worker started',
  );
  if (process.platform === 'linux' && !process.env.MALLOC_ARENA_MAX) {
    logger.info({ setting: WORKER_PROCESS_ENV }, 'MALLOC_ARENA_MAX is not set: start the worker with MALLOC_ARENA_MAX=2 for a peak RSS about 45 MB lower (the image sets it)');
  }
  try {
    await worker.run();
  } finally {
    http?.close();
  }
  logger.info('worker stopped');
}
