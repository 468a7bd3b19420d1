/**
 * What a worker tells the people who run it: Prometheus metrics (Ferry's own, merged with the
 * Temporal SDK's from the runtime's exporter), /healthz and /readyz, an audit line for every
 * activity task, and the SDK's runtime logs routed into the same pino logger.
 */
import { createServer, Server } from 'node:http';
import type { LogLevel, LogMetadata, Logger as SdkLogger } from '@temporalio/common';
import type { Runtime as RuntimeType, WorkerOptions } from '@temporalio/worker';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { Logger } from './logger';
import { freePort } from './free-port';

export interface FerryMetrics {
  registry: Registry;
  rowsCopied: Counter<'table'>;
  bytesCopied: Counter<'table'>;
  batches: Counter<'table'>;
  changesApplied: Counter<'table'>;
  changeLag: Gauge<'table'>;
  slotLagBytes: Gauge<'migration'>;
  slotLagSeconds: Gauge<'migration'>;
  validationMismatches: Counter<'table'>;
  callbacks: Counter<'kind' | 'outcome'>;
  activities: Histogram<'activity' | 'outcome'>;
}

export function createMetrics(): FerryMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'ferry_process_' });
  const registers = [registry];
  return {
    registry,
    rowsCopied: new Counter({ name: 'ferry_rows_copied_total', help: 'Rows copied into target tables', labelNames: ['table'], registers }),
    bytesCopied: new Counter({ name: 'ferry_bytes_copied_total', help: 'COPY bytes streamed into target tables', labelNames: ['table'], registers }),
    batches: new Counter({ name: 'ferry_batches_total', help: 'Copy batches committed', labelNames: ['table'], registers }),
    changesApplied: new Counter({ name: 'ferry_changes_applied_total', help: 'Captured changes applied to the target', labelNames: ['table'], registers }),
    changeLag: new Gauge({
      name: 'ferry_change_lag_pending',
      help: 'Captured changes waiting to be applied, as of the last sync slice of the table',
      labelNames: ['table'],
      registers,
    }),
    slotLagBytes: new Gauge({
      name: 'ferry_slot_lag_bytes',
      help: "Logical capture: WAL the migration's replication slot holds on the source, as its consumer last read it",
      labelNames: ['migration'],
      registers,
    }),
    slotLagSeconds: new Gauge({
      name: 'ferry_slot_lag_seconds',
      help: "Logical capture: seconds a change takes from its commit to the change logs (a heartbeat's round trip through the migration's slot)",
      labelNames: ['migration'],
      registers,
    }),
    validationMismatches: new Counter({
      name: 'ferry_validation_mismatches_total',
      help: 'Ranges whose source and target differed at validation',
      labelNames: ['table'],
      registers,
    }),
    callbacks: new Counter({ name: 'ferry_callbacks_total', help: 'Callback deliveries by kind and outcome', labelNames: ['kind', 'outcome'], registers }),
    activities: new Histogram({
      name: 'ferry_activity_duration_seconds',
      help: 'Activity task duration by activity type and outcome',
      labelNames: ['activity', 'outcome'],
      buckets: [0.05, 0.25, 1, 5, 15, 30, 60, 300],
      registers,
    }),
  };
}

interface ActivityArgs {
  migrationId?: string;
  table?: { source?: { schema: string; name: string } };
  chunk?: { index?: number };
  chunkIndex?: number;
}

function tableLabel(args: ActivityArgs | undefined): string | undefined {
  const source = args?.table?.source;
  return source ? `${source.schema}.${source.name}` : undefined;
}

/**
 * One audit line per activity task (an audit trail): start at debug, then exactly one of completed
 * (info, with duration) or failed (warn, with the error and its stack), carrying migration,
 * table, chunk and attempt. The same interceptor times every activity (ferry_activity_duration_seconds);
 * what an activity did (rows copied, changes applied, callbacks delivered) it counts itself, through
 * the metrics it is given (activities/deps.ts).
 */
export function auditInterceptors(logger: Logger, metrics?: FerryMetrics): NonNullable<WorkerOptions['interceptors']> {
  return {
    activity: [
      (ctx) => ({
        inbound: {
          async execute(input, next) {
            const info = ctx.info;
            const args = input.args[0] as ActivityArgs | undefined;
            const workflowId = info.workflowExecution?.workflowId ?? '';
            const migrationId = args?.migrationId ?? workflowId.split('/')[0];
            const fields = {
              migrationId,
              workflowId,
              activity: info.activityType,
              table: tableLabel(args),
              chunk: args?.chunk?.index ?? args?.chunkIndex,
              attempt: info.attempt,
            };
            const started = process.hrtime.bigint();
            const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
            logger.debug(fields, 'activity started');
            try {
              const result = await next(input);
              const duration = seconds();
              logger.info({ ...fields, durationMs: Math.round(duration * 1000) }, 'activity completed');
              metrics?.activities.observe({ activity: info.activityType, outcome: 'completed' }, duration);
              return result;
            } catch (err) {
              const duration = seconds();
              const cancelled = ctx.cancellationSignal.aborted;
              logger.warn({ ...fields, durationMs: Math.round(duration * 1000), err }, cancelled ? 'activity cancelled' : 'activity failed');
              metrics?.activities.observe({ activity: info.activityType, outcome: cancelled ? 'cancelled' : 'failed' }, duration);
              throw err;
            }
          },
        },
      }),
    ],
  };
}

/** The SDK's logger interface over pino, so runtime and worker logs land in one JSON stream. */
export function sdkLogger(logger: Logger): SdkLogger {
  const levels: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
    TRACE: 'trace',
    DEBUG: 'debug',
    INFO: 'info',
    WARN: 'warn',
    ERROR: 'error',
  };
  const log = (level: LogLevel, message: string, meta?: LogMetadata) => logger[levels[level] ?? 'info']({ sdk: true, ...meta }, message);
  return {
    log,
    trace: (m, meta) => log('TRACE', m, meta),
    debug: (m, meta) => log('DEBUG', m, meta),
    info: (m, meta) => log('INFO', m, meta),
    warn: (m, meta) => log('WARN', m, meta),
    error: (m, meta) => log('ERROR', m, meta),
  };
}

/**
 * Installs the Temporal runtime once per process, before any connection: its logs forwarded to
 * `logger`, and (when metrics are wanted) its Prometheus exporter on a loopback port that
 * serveTelemetry merges into /metrics. Returns that exporter's URL.
 */
export async function installRuntime(options: { logger: Logger; metrics: boolean }): Promise<string | undefined> {
  const { Runtime } = require('@temporalio/worker') as { Runtime: typeof RuntimeType };
  const sdkPort = options.metrics ? await freePort() : undefined;
  const level = (process.env.FERRY_SDK_LOG_LEVEL ?? 'WARN').toUpperCase() as LogLevel;
  Runtime.install({
    logger: sdkLogger(options.logger),
    telemetryOptions: {
      logging: { filter: { core: level, other: level }, forward: {} },
      ...(sdkPort ? { metrics: { prometheus: { bindAddress: `127.0.0.1:${sdkPort}` } } } : {}),
    },
  });
  return sdkPort ? `http://127.0.0.1:${sdkPort}/metrics` : undefined;
}

export interface TelemetryServerOptions {
  port: number;
  host?: string;
  metrics: FerryMetrics;
  /** The SDK exporter's URL (installRuntime); its text is appended to Ferry's own metrics. */
  sdkMetricsUrl?: string;
  /** Ready: the worker polls its task queue. */
  ready: () => boolean;
  /** Live: false once the worker has failed for good. */
  live: () => boolean;
}

/** GET /metrics, /healthz, /readyz on one port (`ferry worker --metrics-port`). */
export async function serveTelemetry(options: TelemetryServerOptions): Promise<Server> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const reply = (status: number, body: string, type = 'text/plain; charset=utf-8') => {
      res.writeHead(status, { 'content-type': type });
      res.end(body);
    };
    if (req.method !== 'GET') return reply(405, 'method not allowed\n');
    if (path === '/healthz') return options.live() ? reply(200, 'ok\n') : reply(503, 'worker failed\n');
    if (path === '/readyz') return options.ready() ? reply(200, 'ready\n') : reply(503, 'not polling\n');
    if (path !== '/metrics') return reply(404, 'not found: try /metrics, /healthz or /readyz\n');
    void (async () => {
      const own = await options.metrics.registry.metrics();
      let sdk = '';
      if (options.sdkMetricsUrl) {
        sdk = await fetch(options.sdkMetricsUrl, { signal: AbortSignal.timeout(2000) })
          .then((r) => (r.ok ? r.text() : ''))
          .catch(() => '');
      }
      reply(200, `${own}\n${sdk}`, options.metrics.registry.contentType);
    })().catch((err: Error) => reply(500, `${err.message}\n`));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '0.0.0.0', () => resolve());
  });
  return server;
}
