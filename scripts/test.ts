/**
 * `npm test`: provisions what the suites need (the temporal binary, a running PostgreSQL, Chromium
 * for the Web UI test, PgBouncer for the switch's, nats-server for the event stream's), then runs the type checker, the linter and jest. Extra arguments go to jest.
 * `npm run test:soak` (`--soak`): the same provisioning, then only the soak tier (test/soak), whose
 * cases run at the scale a claim was reproduced at.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureChromium } from '../src/dev/chromium';
import { ensureNatsServer } from '../src/dev/nats';
import { ensurePgBouncer } from '../src/dev/pgbouncer';
import { DEFAULT_TEST_PG, ensurePostgres } from '../src/dev/postgres';
import { ensureTemporalBinary } from '../src/dev/temporal-binary';

const root = join(__dirname, '..');
const bin = (name: string) => join(root, 'node_modules', '.bin', name);

function step(title: string, command: string, args: string[], env: NodeJS.ProcessEnv = process.env, onFailure?: () => void): void {
  process.stderr.write(`\n== ${title}\n`);
  const started = Date.now();
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit', env });
  if (result.status !== 0) onFailure?.();
  process.stderr.write(`== ${title}: ${result.status === 0 ? 'ok' : 'FAILED'} (${Math.round((Date.now() - started) / 1000)}s)\n`);
  if (result.status !== 0) process.exit(result.status ?? 1);
}

async function main(): Promise<void> {
  const binary = await ensureTemporalBinary();
  if (!binary) {
    process.stderr.write('ferry: no temporal binary and no Go toolchain: tests will try @temporalio/testing\'s download (internet needed)\n');
  }
  const pg = process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG;
  await ensurePostgres(pg);
  const chromium = ensureChromium();
  // Installed here once rather than by suites that would race for apt-get's lock.
  const pgbouncer = ensurePgBouncer();
  const natsServer = ensureNatsServer();
  const env = { ...process.env, FERRY_TEST_PG: pg, FERRY_CHROMIUM_BIN: chromium, FERRY_PGBOUNCER_BIN: pgbouncer, FERRY_NATS_SERVER_BIN: natsServer, ...(binary ? { FERRY_TEMPORAL_BIN: binary } : {}) };
  const soak = process.argv.includes('--soak');
  const jestArgs = process.argv.slice(2).filter((a) => a !== '--soak');
  if (soak) jestArgs.unshift('--config', join(root, 'jest.soak.config.js'));
  else {
    step('type check (tsc --noEmit)', bin('tsc'), ['--noEmit', '-p', '.']);
    step('lint (eslint)', bin('eslint'), ['.']);
  }
  // Diagnoses of migrations that stopped moving, written by the suites (test/helpers/stack.ts):
  // printed after a failed run, where the end of a long log shows them.
  const diagnoses = join(tmpdir(), `ferry-test-diagnoses-${process.pid}.log`);
  step(soak ? 'soak tests (jest)' : 'tests (jest)', bin('jest'), jestArgs, { ...env, FERRY_TEST_DIAGNOSES: diagnoses }, () => {
    if (!existsSync(diagnoses)) return;
    const lines = readFileSync(diagnoses, 'utf8').trimEnd().split('\n');
    process.stderr.write(`\n== diagnoses written during the failed run (${diagnoses}), the last 80 lines\n${lines.slice(-80).join('\n')}\n`);
  });
  rmSync(diagnoses, { force: true });
}

main().catch((err) => {
  process.stderr.write(`ferry test: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
