/** `ferry server` (embedded Temporal dev server) and `ferry worker` (one pool member). */
import { Command } from 'commander';
import { temporalConfig } from '../config';
import { duration, positiveInt } from './args';

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
    .option('--codec-endpoint <url>', 'payload codec endpoint for the Web UI (see `ferry codec-server`)')
    .action(async (opts: { port: number; uiPort: number; dbFile?: string; headless?: boolean; codecEndpoint?: string }) => {
      // Loaded on demand: the worker SDK and its dependencies make every other verb slower to start.
      const { startDevServer } = require('../temporal/dev-server') as typeof import('../temporal/dev-server');
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
      process.stdout.write(`workers and clients: TEMPORAL_ADDRESS=${server.address}\n`);
      const reason = await Promise.race([untilSignal(), server.exited.then(() => 'exit' as const)]);
      if (reason !== 'exit') await server.stop();
    });

  program
    .command('worker')
    .description('run one worker of the pool: executes migrations\' workflows and activities')
    .option('--concurrency <n>', 'activities this worker runs at once (FERRY_WORKER_CONCURRENCY)', positiveInt)
    .option('--workflow-concurrency <n>', 'workflow tasks this worker runs at once', positiveInt)
    .option('--max-activities-per-second <n>', 'rate cap for this worker', positiveInt)
    .option('--task-queue-activities-per-second <n>', 'server-side rate cap across all workers of the queue', positiveInt)
    .option('--shutdown-grace <duration>', 'how long SIGTERM waits for in-flight activities', duration, 30_000)
    .option('--identity <name>', 'worker identity shown in Temporal')
    .action(
      async (opts: {
        concurrency?: number;
        workflowConcurrency?: number;
        maxActivitiesPerSecond?: number;
        taskQueueActivitiesPerSecond?: number;
        shutdownGrace: number;
        identity?: string;
      }) => {
        const { createFerryWorker } = require('../worker') as typeof import('../worker');
        const { createLogger } = require('../logger') as typeof import('../logger');
        const logger = createLogger({ name: 'ferry-worker' });
        const temporal = temporalConfig();
        const envConcurrency = Number(process.env.FERRY_WORKER_CONCURRENCY) || undefined;
        const worker = await createFerryWorker({
          temporal,
          logger,
          maxConcurrentActivityTaskExecutions: opts.concurrency ?? envConcurrency,
          maxConcurrentWorkflowTaskExecutions: opts.workflowConcurrency,
          maxActivitiesPerSecond: opts.maxActivitiesPerSecond,
          maxTaskQueueActivitiesPerSecond: opts.taskQueueActivitiesPerSecond,
          shutdownGraceTime: opts.shutdownGrace,
          identity: opts.identity,
        });
        const onSignal = (signal: NodeJS.Signals) => {
          logger.info({ signal }, 'shutting down: finishing or checkpointing in-flight work');
          worker.shutdown();
        };
        process.once('SIGINT', onSignal);
        process.once('SIGTERM', onSignal);
        logger.info({ address: temporal.address, namespace: temporal.namespace, taskQueue: temporal.taskQueue }, 'worker started');
        await worker.run();
        logger.info('worker stopped');
      },
    );
}
