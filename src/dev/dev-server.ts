/**
 * Runs `temporal server start-dev` with Ferry's search attributes registered, on chosen or free
 * ports, and waits until its frontend answers. Falls back to @temporalio/testing's downloaded
 * server when no local binary can be had (that path needs the internet).
 */
import { ChildProcess, spawn } from 'node:child_process';
import { Connection } from '@temporalio/client';
import { FerryPhaseKey, FerrySourceKey, FerryStateKey, FerryTargetKey, SEARCH_ATTRIBUTES } from '../core/names';
import { ensureTemporalBinary } from './temporal-binary';
import { freePort } from '../free-port';

export { freePort } from '../free-port';

export interface DevServerOptions {
  port?: number;
  uiPort?: number;
  /** Persist to this SQLite file (survives restarts); in-memory otherwise. */
  dbFile?: string;
  headless?: boolean;
  namespace?: string;
  /** More namespaces registered at start, each with Ferry's search attributes (the tests' shared servers). */
  extraNamespaces?: string[];
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
  /** --dynamic-config-value KEY=JSON entries. */
  dynamicConfig?: Record<string, unknown>;
  /** Pass the server's own output through (for `ferry server`). */
  inheritOutput?: boolean;
  codecEndpoint?: string;
  report?: (line: string) => void;
  /** Picks each port Ferry chooses (default: one free now); a test hands out a taken one. */
  pickPort?: () => Promise<number>;
}

/**
 * Dynamic configuration the dev server gets unless a caller overrides it. A history shard's task
 * queues read new tasks at most 20 times a second by default (`history.*ProcessorMaxPollRPS`),
 * and the dev server has one shard: a workflow whose tasks follow each other within 50 ms — every
 * migration, once its first few used up the limiter's burst — waited 30–45 ms for each workflow
 * or activity task to be handed to a worker. A one-row migration took 550–690 ms inside its
 * workflow, 290 ms with these (docs/benchmarks.md).
 */
export const DEV_SERVER_DYNAMIC_CONFIG: Record<string, unknown> = {
  'history.transferProcessorMaxPollRPS': 1000,
  'history.timerProcessorMaxPollRPS': 1000,
};

/** What DEV_SERVER_DYNAMIC_CONFIG changes, each shard task queue read at most `perSecond` times a second. */
export function shardReadRates(perSecond: number): Record<string, unknown> {
  return Object.fromEntries(Object.keys(DEV_SERVER_DYNAMIC_CONFIG).map((key) => [key, perSecond]));
}

/** Temporal's own values for what DEV_SERVER_DYNAMIC_CONFIG changes: to measure what they cost. */
export const TEMPORAL_DEFAULT_DYNAMIC_CONFIG = shardReadRates(20);

/** `--dynamic-config-value KEY=JSON` arguments: Ferry's defaults, then the caller's. */
function dynamicConfigArgs(options: DevServerOptions): string[] {
  return Object.entries({ ...DEV_SERVER_DYNAMIC_CONFIG, ...options.dynamicConfig }).flatMap(([key, value]) => ['--dynamic-config-value', `${key}=${JSON.stringify(value)}`]);
}

export interface DevServer {
  address: string;
  namespace: string;
  uiUrl?: string;
  process?: ChildProcess;
  stop(): Promise<void>;
  /** Resolves when the server process exits. */
  exited: Promise<number | null>;
}

/** Polls the frontend until the namespace answers, or fails after timeoutMs. */
export async function waitForTemporal(address: string, namespace: string, timeoutMs: number, exited?: Promise<unknown>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  void exited?.then(() => {
    gone = true;
  });
  let lastError: unknown;
  while (Date.now() < deadline && !gone) {
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1_000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } finally {
        await connection.close();
      }
    } catch (err) {
      lastError = err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  throw new Error(
    gone ? 'the Temporal dev server exited during start-up' : `Temporal at ${address} did not answer within ${timeoutMs / 1000}s`,
    { cause: lastError },
  );
}

export async function startDevServer(options: DevServerOptions = {}): Promise<DevServer> {
  const namespace = options.namespace ?? 'default';
  const binary = await ensureTemporalBinary(options.report);
  if (!binary) return startDownloadedServer(options, namespace);

  // The ports are picked free and then handed over, so another process may take one in between
  // (parallel test suites start dev servers at once): a server that exits because an address is in
  // use is started again on new ports, when Ferry chose them.
  const portsChosen = options.port === undefined && (options.headless || options.uiPort === undefined);
  const pickPort = options.pickPort ?? freePort;
  for (let attempt = 1; ; attempt += 1) {
    const port = options.port ?? (await pickPort());
    const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(port), '--namespace', namespace];
    for (const extra of options.extraNamespaces ?? []) args.push('--namespace', extra);
    args.push('--log-level', options.logLevel ?? 'error');
    let uiUrl: string | undefined;
    if (options.headless) {
      args.push('--headless');
    } else {
      const uiPort = options.uiPort ?? (await pickPort());
      args.push('--ui-port', String(uiPort));
      uiUrl = `http://127.0.0.1:${uiPort}`;
    }
    if (options.dbFile) args.push('--db-filename', options.dbFile);
    if (options.codecEndpoint) args.push('--ui-codec-endpoint', options.codecEndpoint);
    for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${name}=${type}`);
    args.push(...dynamicConfigArgs(options));

    const child = spawn(binary, args, { stdio: options.inheritOutput ? 'inherit' : ['ignore', 'ignore', 'pipe'] });
    // The first lines say why a server failed (a Go panic's stack follows them); the last, what it
    // did last. The tail holds only what came after the head, so the two never repeat each other.
    let stderrHead = '';
    let stderrTail = '';
    let stderrCut = false;
    child.stderr?.on('data', (d: Buffer) => {
      const text = d.toString();
      const room = Math.max(0, 2000 - stderrHead.length);
      stderrHead += text.slice(0, room);
      const rest = stderrTail + text.slice(room);
      stderrCut ||= rest.length > 2000;
      stderrTail = rest.slice(-2000);
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const killOnExit = () => child.kill('SIGKILL');
    process.once('exit', killOnExit);

    const address = `127.0.0.1:${port}`;
    try {
      await waitForTemporal(address, namespace, 60_000, exited);
    } catch (err) {
      child.kill('SIGKILL');
      process.removeListener('exit', killOnExit);
      const stderr = stderrHead + (stderrCut ? '\n…\n' : '') + stderrTail;
      if (portsChosen && attempt < 3 && /address already in use/.test(stderr)) {
        options.report?.(`ferry: the Temporal dev server found a port taken (attempt ${attempt}); starting it again on new ports`);
        continue;
      }
      throw new Error(`could not start the Temporal dev server (${binary} ${args.join(' ')}): ${stderr.trim()}`, { cause: err });
    }
    return {
      address,
      namespace,
      uiUrl,
      process: child,
      exited,
      async stop() {
        process.removeListener('exit', killOnExit);
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      },
    };
  }
}

/** Last resort where no binary can be built: @temporalio/testing downloads one (internet needed). */
async function startDownloadedServer(options: DevServerOptions, namespace: string): Promise<DevServer> {
  options.report?.('ferry: no temporal binary and no Go toolchain; downloading a dev server through @temporalio/testing');
  const { TestWorkflowEnvironment } = await import('@temporalio/testing');
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'cached-download' },
      namespace,
      port: options.port,
      ui: !options.headless,
      uiPort: options.uiPort,
      dbFilename: options.dbFile,
      searchAttributes: [FerryStateKey, FerryPhaseKey, FerrySourceKey, FerryTargetKey],
      extraArgs: [...dynamicConfigArgs(options), ...(options.extraNamespaces ?? []).flatMap((extra) => ['--namespace', extra])],
    },
  });
  let resolveExit: (code: number | null) => void = () => undefined;
  const exited = new Promise<number | null>((r) => (resolveExit = r));
  return {
    address: env.address,
    namespace,
    exited,
    async stop() {
      await env.teardown();
      resolveExit(0);
    },
  };
}
