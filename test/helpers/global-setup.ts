/**
 * Once per `jest` run: make sure PostgreSQL answers, the temporal binary exists, dist/ is
 * compiled from the current sources (the `ferry` processes tests spawn run it, see bin/ferry.js),
 * the workflow bundle is built (cached by content hash, so workers and tests skip webpack), and one
 * Temporal dev server per jest worker runs for the suites to share (shared-temporal.ts; stopped
 * by global-teardown.ts).
 */
import { DEFAULT_TEST_PG, ensurePostgres } from '../../src/dev/postgres';
import { ensureTemporalBinary } from '../../src/dev/temporal-binary';
import { workflowBundlePath } from '../../src/temporal/bundle';
import { SHARED_TEMPORAL_ENV, startSharedServers } from './shared-temporal';

// Plain Node (bin/ferry.js and scripts/run.js use it before anything is compiled).
const { build } = require('../../scripts/build') as { build: () => number };

/** What global-teardown.ts stops (jest runs both in its own process, where this global lives). */
export const SHARED_SERVERS_GLOBAL = '__ferrySharedTemporal';

export default async function globalSetup(globalConfig: { maxWorkers: number }): Promise<void> {
  // Without it spawned CLIs and workers would fall back to tsx: slower, and not what ships.
  if (build() !== 0) throw new Error('compiling dist/ failed (see tsc\'s output above)');
  process.env.FERRY_TEST_PG ??= DEFAULT_TEST_PG;
  await ensurePostgres(process.env.FERRY_TEST_PG);
  const binary = await ensureTemporalBinary();
  if (binary) process.env.FERRY_TEMPORAL_BIN = binary;
  process.env.FERRY_WORKFLOW_BUNDLE = workflowBundlePath();
  // jest's workers are started after this, with this process's environment.
  const shared = await startSharedServers(Math.max(1, globalConfig.maxWorkers));
  (globalThis as Record<string, unknown>)[SHARED_SERVERS_GLOBAL] = shared.stop;
  process.env[SHARED_TEMPORAL_ENV] = shared.env;
}
