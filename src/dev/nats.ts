/**
 * A real NATS server with JetStream for the event stream's tests: Debian's `nats-server`
 * (installed when missing, as Chromium is), started on a free port with its store in a
 * directory of its own, which survives a stop so that the same server can be started again
 * (an outage, not a loss).
 */
import { ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDebianPackage, locateExecutable } from './chromium';
import { freePort } from '../free-port';

const DEBIAN_PATH = '/usr/sbin/nats-server';

export function locateNatsServer(env: NodeJS.ProcessEnv = process.env): string | null {
  return locateExecutable(env, 'FERRY_NATS_SERVER_BIN', 'nats-server', DEBIAN_PATH);
}

export function ensureNatsServer(report?: (line: string) => void): string {
  return ensureDebianPackage({
    pkg: 'nats-server',
    purpose: 'the event stream (FERRY_NATS_URL)',
    locate: () => locateNatsServer(),
    ...(report ? { report } : {}),
    notFound: (reason) => new Error(`nats-server was not found (PATH, ${DEBIAN_PATH}, FERRY_NATS_SERVER_BIN). ${reason} Install Debian's \`nats-server\` package.`),
  });
}

export interface NatsServer {
  url: string;
  port: number;
  /** Stops the server (SIGKILL when `hard`), keeping its store. */
  stop(hard?: boolean): Promise<void>;
  /** Starts it again on the same port with the same store. */
  start(): Promise<void>;
  /** Stops it and removes its store. */
  remove(): Promise<void>;
}

/** `nats-server -js` on a free port of 127.0.0.1, its store in a temporary directory. */
export async function startNatsServer(): Promise<NatsServer> {
  const binary = ensureNatsServer();
  const store = mkdtempSync(join(tmpdir(), 'ferry-nats-'));
  const port = await freePort();
  let child: ChildProcess | undefined;
  let output = '';
  const start = async () => {
    child = spawn(binary, ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', store], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d) => (output = (output + d).slice(-4000)));
    child.stderr!.on('data', (d) => (output = (output + d).slice(-4000)));
    await untilListening(port, child, () => output);
  };
  const stop = async (hard = false) => {
    const running = child;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill(hard ? 'SIGKILL' : 'SIGTERM');
    await exited;
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop,
    start,
    async remove() {
      await stop();
      rmSync(store, { recursive: true, force: true });
    },
  };
}

async function untilListening(port: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nats-server exited with ${child.exitCode}: ${output()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ port, host: '127.0.0.1' }, () => {
        socket.end();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    });
    // JetStream is ready once the server says so; the port opens a moment before.
    if (open && /Server is ready/.test(output())) return;
    if (Date.now() > deadline) throw new Error(`nats-server did not start within 15 s: ${output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
