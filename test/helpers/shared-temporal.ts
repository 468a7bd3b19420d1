/**
 * One Temporal dev server per jest worker, started once for the whole run (global-setup.ts) and
 * shared by the suites that run on that worker, each in a namespace of its own: a suite's
 * workflow ids, `ferry list` and search attributes see only its own workflows, as on a server of
 * its own, without a server start and stop per suite. Suites that need a server they can stop,
 * restart or configure (`temporal` options, `restartableServer`) still start their own.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DevServer, startDevServer, waitForTemporal } from '../../src/dev/dev-server';

/** Where global-setup.ts tells the test processes about the shared servers (JSON of SharedServers). */
export const SHARED_TEMPORAL_ENV = 'FERRY_TEST_SHARED_TEMPORAL';
/** Namespaces registered on each shared server: more than any jest worker runs suites. */
export const SHARED_NAMESPACES = 64;

interface SharedServers {
  /** Claims: a directory per namespace taken (mkdir is atomic across processes). */
  claims: string;
  addresses: string[];
}

const namespaceName = (i: number) => `ferry-test-${i}`;

/** Starts one server per jest worker (global set-up); `stop` ends them (global teardown). */
export async function startSharedServers(workers: number): Promise<{ env: string; stop: () => Promise<void> }> {
  const namespaces = Array.from({ length: SHARED_NAMESPACES }, (_, i) => namespaceName(i + 1));
  const servers: DevServer[] = [];
  const claims = mkdtempSync(join(tmpdir(), 'ferry-test-namespaces-'));
  const stop = async () => {
    await Promise.allSettled(servers.map((s) => s.stop()));
    rmSync(claims, { recursive: true, force: true });
  };
  try {
    for (const started of await Promise.allSettled(
      Array.from({ length: workers }, () => startDevServer({ headless: true, namespace: 'default', extraNamespaces: namespaces })),
    )) {
      if (started.status === 'rejected') throw started.reason;
      servers.push(started.value);
    }
    await Promise.all(servers.map((s) => waitForTemporal(s.address, namespaces[namespaces.length - 1], 30_000)));
  } catch (err) {
    await stop();
    throw err;
  }
  const shared: SharedServers = { claims, addresses: servers.map((s) => s.address) };
  return { env: JSON.stringify(shared), stop };
}

/**
 * This jest worker's shared server in a namespace no other suite has had, or undefined when
 * there is none (jest run without the global set-up, every namespace taken). Its `stop` only
 * gives the namespace up: the server stays for the next suite.
 */
export function claimSharedServer(): DevServer | undefined {
  const text = process.env[SHARED_TEMPORAL_ENV];
  if (!text) return undefined;
  const shared = JSON.parse(text) as SharedServers;
  const worker = Number(process.env.JEST_WORKER_ID ?? '1');
  const index = (worker - 1) % shared.addresses.length;
  for (let i = 1; i <= SHARED_NAMESPACES; i += 1) {
    try {
      mkdirSync(join(shared.claims, `${index}-${i}`));
    } catch {
      continue;
    }
    return {
      address: shared.addresses[index],
      namespace: namespaceName(i),
      exited: new Promise(() => undefined),
      async stop() {
        // The namespace stays claimed: its workflows stay on the server until the run ends.
      },
    };
  }
  return undefined;
}
