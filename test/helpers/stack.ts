/**
 * A real Temporal dev server (on free ports, or the jest worker's shared one in a namespace of the
 * stack's own), a client, and Ferry workers: in this process (fast)
 * or as separate `ferry worker` processes (for SIGKILL). Teardown stops everything it started.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Connection, WorkflowExecutionDescription } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime, WorkerOptions } from '@temporalio/worker';
import type { DataConverter } from '@temporalio/common';
import { FerryClient } from '../../src/client';
import { dataConverterFromEnv } from '../../src/codec';
import type { ResultDocument } from '../../src/core/status';
import { WORKER_PROCESS_ENV } from '../../src/config';
import type { TimingsInput } from '../../src/core/timings';
import { connectionEnvVar } from '../../src/core/names';
import { Logger, silentLogger } from '../../src/logger';
import { DevServer, DevServerOptions, startDevServer } from '../../src/dev/dev-server';
import type { FerryMetrics } from '../../src/telemetry';
import { createFerryWorker, FerryWorker } from '../../src/worker';
import { claimSharedServer } from './shared-temporal';
import { stateQuery } from '../../workflows/definitions';

export const ROOT = join(__dirname, '..', '..');

/**
 * The waits every migration and plan the tests start get, where production's would only make
 * them slower: a killed worker's activity is retried after 8 s rather than 20, a callback that
 * cannot be delivered is given up after 13 s of retries (1 s, then 2 s: Temporal's server waits at
 * least a second between attempts) rather than two minutes. The production values are asserted
 * from recorded histories (test/unit/timings.test.ts).
 */
export const TEST_TIMINGS: TimingsInput = {
  heartbeatTimeoutMs: 8_000,
  callbackRetry: { initialIntervalMs: 1_000, maximumIntervalMs: 2_000, maximumAttempts: 8 },
};
export const FERRY_BIN = join(ROOT, 'bin', 'ferry.js');

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Collects a child's output until it closes; SIGKILLs it if it outlives `timeoutMs`. */
function collected(child: ChildProcess, timeoutMs: number): Promise<CliRun> {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d) => (stdout += d));
    child.stderr?.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    // 'close', not 'exit': the process can have exited before its output was read from the
    // pipes (a CI run saw a refusal's exit code 2 with its stderr still empty).
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

let runtimeInstalled = false;
/** Keeps the SDK's own INFO lines out of test output. */
function quietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({ logger: new DefaultLogger('ERROR') });
  } catch {
    // already installed in this process
  }
}

export interface StackOptions {
  /** Connection name → postgres URL, exported to workers as FERRY_CONN_<NAME>. */
  connections: Record<string, string>;
  /** In-process workers to start right away. */
  workers?: number;
  /** How they are started, asked anew for each one. */
  workerOptions?: () => WorkerStartOptions;
  server?: DevServerOptions;
  /**
   * A dev server of the stack's own even with no `server` options (a test that reads the
   * server's command line). Otherwise, with none, the stack runs on this jest worker's shared
   * server in a namespace of its own (shared-temporal.ts).
   */
  ownServer?: boolean;
  extraEnv?: Record<string, string>;
  /** The test client's data converter; by default the payload codec of the env (FERRY_CODEC_KEY), as the workers'. */
  dataConverter?: DataConverter;
}

export interface RunningProcessWorker {
  process: ChildProcess;
  identity: string;
  output: () => string;
  exited: Promise<number | null>;
}

/** How an in-process worker is started. */
export interface WorkerStartOptions {
  interceptors?: WorkerOptions['interceptors'];
  activitySlots?: number;
  taskQueue?: string;
  /** Variables to set (or, undefined, to remove) for this worker only. */
  env?: Record<string, string | undefined>;
  /** Where the worker logs (the audit lines of every activity); silent by default. */
  logger?: Logger;
  /** Ferry's Prometheus metrics, fed as `ferry worker --metrics-port` feeds them (src/telemetry.ts createMetrics). */
  metrics?: FerryMetrics;
}

export class TestStack {
  readonly inProcess: { worker: FerryWorker; running: Promise<void> }[] = [];
  readonly processes: RunningProcessWorker[] = [];

  /** The options the server was started with; startServer() reuses them. */
  private serverOptions: DevServerOptions = {};

  private constructor(
    public server: DevServer,
    readonly connection: Connection,
    readonly client: Client,
    readonly ferry: FerryClient,
    readonly taskQueue: string,
    readonly env: NodeJS.ProcessEnv,
  ) {}

  static async start(options: StackOptions): Promise<TestStack> {
    quietRuntime();
    const sharable = !options.ownServer && Object.keys(options.server ?? {}).length === 0;
    const server = (sharable ? claimSharedServer() : undefined) ?? (await startDevServer({ headless: true, ...options.server }));
    const connection = await Connection.connect({ address: server.address });
    const dataConverter = options.dataConverter ?? dataConverterFromEnv({ ...process.env, ...options.extraEnv });
    const client = new Client({ connection, namespace: server.namespace, dataConverter });
    const taskQueue = `ferry-test-${randomBytes(3).toString('hex')}`;
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...options.extraEnv,
      TEMPORAL_ADDRESS: server.address,
      TEMPORAL_NAMESPACE: server.namespace,
      FERRY_TASK_QUEUE: taskQueue,
    };
    for (const [name, url] of Object.entries(options.connections)) env[connectionEnvVar(name)] = url;
    const ferry = FerryClient.fromClient(client, { address: server.address, taskQueue }, { timings: TEST_TIMINGS });
    const stack = new TestStack(server, connection, client, ferry, taskQueue, env);
    stack.serverOptions = { ...options.server };
    for (let i = 0; i < (options.workers ?? 1); i += 1) await stack.startWorker(options.workerOptions?.());
    return stack;
  }

  /** An in-process worker; interceptors can inject faults around activities. */
  async startWorker(
    options: WorkerStartOptions = {},
  ): Promise<FerryWorker> {
    const worker = await createFerryWorker({
      temporal: { address: this.server.address, namespace: this.server.namespace, taskQueue: options.taskQueue ?? this.taskQueue },
      logger: options.logger ?? silentLogger(),
      env: { ...this.env, ...options.env },
      identity: `in-process-${this.inProcess.length + 1}`,
      shutdownGraceTime: '2 seconds',
      interceptors: options.interceptors,
      maxConcurrentActivityTaskExecutions: options.activitySlots,
      metrics: options.metrics,
    });
    this.inProcess.push({ worker, running: worker.run() });
    return worker;
  }

  /** A separate `ferry worker` process, so a test can SIGKILL it. */
  startWorkerProcess(identity: string, args: string[] = [], env: Record<string, string> = {}): RunningProcessWorker {
    const child = spawn(process.execPath, [FERRY_BIN, 'worker', '--identity', identity, '--shutdown-grace', '2s', ...args], {
      env: { ...this.env, ...WORKER_PROCESS_ENV, FERRY_LOG_LEVEL: 'info', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout?.on('data', (d) => (output = (output + d).slice(-20_000)));
    child.stderr?.on('data', (d) => (output = (output + d).slice(-20_000)));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const worker = { process: child, identity, output: () => output, exited };
    this.processes.push(worker);
    return worker;
  }

  /** Starts a `ferry worker` process and waits until it polls the task queue. */
  async startWorkerProcessReady(identity: string, args: string[] = [], env: Record<string, string> = {}): Promise<RunningProcessWorker> {
    const worker = this.startWorkerProcess(identity, args, env);
    await eventually(async () => {
      if (worker.process.exitCode !== null) throw new Error(`worker ${identity} exited: ${worker.output()}`);
      return worker.output().includes('"msg":"worker started"');
    }, 60_000);
    return worker;
  }

  /** Runs the `ferry` CLI against this stack; resolves with its exit code and output. */
  runCli(args: string[], extraEnv: Record<string, string> = {}, timeoutMs = 120_000): Promise<CliRun> {
    const child = spawn(process.execPath, [FERRY_BIN, ...args], { env: { ...this.env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
    return collected(child, timeoutMs);
  }

  /**
   * Runs the `ferry` CLI on a real pseudo-terminal (util-linux `script`), so it sees a TTY; the
   * terminal's output, control sequences included, comes back as stdout.
   */
  runCliOnTerminal(args: string[], timeoutMs = 120_000): Promise<CliRun> {
    const command = [process.execPath, FERRY_BIN, ...args].map((a) => `'${a}'`).join(' ');
    const child = spawn('script', ['-qefc', command, '/dev/null'], { env: this.env, stdio: ['ignore', 'pipe', 'pipe'] });
    return collected(child, timeoutMs);
  }

  /** Stops the Temporal server (SIGTERM); workers and the client stay up and retry. */
  async stopServer(): Promise<void> {
    await this.server.stop();
  }

  /**
   * Starts the server again with its first options. Workers and clients reconnect only to the
   * same address, and find their workflows only in the same database: start the stack with
   * `server: { port, dbFile }` to restart it.
   */
  async startServer(): Promise<void> {
    if (!this.serverOptions.port || !this.serverOptions.dbFile) throw new Error('restarting needs server.port and server.dbFile');
    this.server = await startDevServer({ headless: true, ...this.serverOptions });
  }

  async stopInProcessWorkers(): Promise<void> {
    for (const { worker } of this.inProcess) worker.shutdown();
    await Promise.allSettled(this.inProcess.map((w) => w.running));
    this.inProcess.length = 0;
  }

  async teardown(): Promise<void> {
    for (const p of this.processes) {
      if (p.process.exitCode === null && p.process.signalCode === null) p.process.kill('SIGKILL');
    }
    await Promise.allSettled(this.processes.map((p) => p.exited));
    await this.stopInProcessWorkers();
    await this.connection.close().catch(() => undefined);
    await this.server.stop();
  }
}

/** Polls `fn` until it returns a truthy value (or throws after timeoutMs). */
export async function eventually<T>(fn: () => Promise<T | undefined | null | false>, timeoutMs = 60_000, intervalMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (err) {
      lastError = err;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`condition not met within ${timeoutMs}ms${lastError ? `: ${String(lastError)}` : ''}`);
}

/** Waits until the migration reaches `phase`; on timeout the error carries its status document. */
export async function waitForPhase(ferry: FerryClient, id: string, phase: string, timeoutMs = 90_000): Promise<void> {
  let last: unknown;
  let ended: string | undefined;
  try {
    // A migration that ended never reaches the phase: said at once, not after the whole timeout.
    await eventually(async () => {
      const status = await ferry.status(id);
      last = status;
      if (status.endedAt) ended = `migration ended in ${status.state}: ${JSON.stringify(status.error)}`;
      return ended !== undefined || status.phase === phase;
    }, timeoutMs);
    if (ended) throw new Error(ended);
  } catch (err) {
    throw new Error(`${(err as Error).message}\nlast status: ${JSON.stringify(last, null, 1).slice(0, 6000)}`);
  }
}

/** The result, or after timeoutMs an error describing where the migration stands. */
export async function resultWithin(ferry: FerryClient, id: string, timeoutMs = 90_000): Promise<ResultDocument> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      void diagnose(ferry, id).then((text) => reject(new Error(`no result within ${timeoutMs}ms\n${text}`)));
    }, timeoutMs);
  });
  try {
    return await Promise.race([ferry.result(id), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * State, table phases, events and pending activities of a migration and its table workflows;
 * and, for a migration that stopped moving, what Temporal knows of it: its pending workflow task,
 * the workers polling its task queue, and the last events of its history.
 */
export async function diagnose(ferry: FerryClient, id: string): Promise<string> {
  const lines: string[] = [`diagnosis of ${id} at ${new Date().toISOString()}`];
  const parent = await ferry.handle(id).describe().catch(() => undefined);
  // The state query on its own, to tell a slow answer from an error (the status falls back to
  // visibility on either, after 5 s).
  const started = Date.now();
  const query = await ferry.client.connection
    .withDeadline(Date.now() + 20_000, () => ferry.handle(id).query(stateQuery))
    .then(
      () => 'answered',
      (err: Error) => `failed: ${err.message}`,
    );
  lines.push(`state query ${query} after ${Date.now() - started} ms`);
  try {
    const s = await ferry.status(id);
    // Unanswered, the status is visibility's view: no tables, no events.
    lines.push(`state ${s.state} phase ${s.phase}${query === 'answered' ? '' : " (visibility's view)"}`);
    for (const t of s.tables) lines.push(`  ${t.source} ${t.phase} rows ${t.rowsCopied} lag ${JSON.stringify(t.lag)}`);
    lines.push(`events: ${s.events.map((e) => `${e.type}${e.table ? `(${e.table})` : ''}`).join(' ')}`);
    const pending = (w: string, d: WorkflowExecutionDescription | undefined) => {
      for (const a of d?.raw.pendingActivities ?? []) {
        lines.push(`  pending in ${w}: ${a.activityType?.name} attempt ${a.attempt} ${a.lastFailure?.message ?? ''}`);
      }
    };
    pending(id, parent);
    // Without the query's answer the tables are unknown: their workflows are looked for by id,
    // up to the first that does not exist (at most 64).
    const known = s.tables.length;
    for (let i = 0; i < (known > 0 ? known : 64); i += 1) {
      const w = `${id}/table-${i}`;
      const d = await ferry.handle(w).describe().catch(() => undefined);
      if (!d && known === 0) break;
      lines.push(`  ${w}: ${d?.status.name ?? 'not found'}`);
      pending(w, d);
    }
  } catch (err) {
    lines.push(`(diagnosis failed: ${String(err)})`);
  }
  try {
    lines.push(...(await temporalView(ferry, id, parent ?? (await ferry.handle(id).describe()))));
  } catch (err) {
    lines.push(`(Temporal's view failed: ${String(err)})`);
  }
  const text = lines.join('\n');
  // `npm test` prints this file last when jest fails, where a CI log's tail shows it.
  if (process.env.FERRY_TEST_DIAGNOSES) appendFileSync(process.env.FERRY_TEST_DIAGNOSES, `${text}\n\n`);
  return text;
}

/** The migration's pending workflow task, its task queue's pollers and its history's last events. */
async function temporalView(ferry: FerryClient, id: string, d: WorkflowExecutionDescription): Promise<string[]> {
  const lines: string[] = [];
  const at = (t: { seconds?: unknown } | null | undefined) => (t?.seconds ? new Date(Number(t.seconds) * 1000).toISOString() : '-');
  const task = d.raw.pendingWorkflowTask;
  if (task) lines.push(`workflow task: ${temporal.api.enums.v1.PendingWorkflowTaskState[task.state ?? 0]} attempt ${task.attempt} scheduled ${at(task.scheduledTime)} started ${at(task.startedTime)}`);
  const { pollers } = await ferry.client.workflowService.describeTaskQueue({
    namespace: ferry.client.options.namespace,
    taskQueue: { name: d.taskQueue },
    taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
  });
  lines.push(`workflow pollers on ${d.taskQueue}: ${(pollers ?? []).map((p) => `${p.identity} (last ${at(p.lastAccessTime)})`).join(', ') || 'none'}`);
  const events = (await ferry.handle(id).fetchHistory()).events ?? [];
  lines.push(`last events: ${events.slice(-12).map((e) => `${e.eventId} ${temporal.api.enums.v1.EventType[e.eventType ?? 0].replace('EVENT_TYPE_', '')} ${at(e.eventTime)}`).join('; ')}`);
  return lines;
}
