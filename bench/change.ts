/**
 * `npm run bench:change` — a change plan's backfill against a plain batched UPDATE loop, and
 * what either does to the writers beside it, on this machine.
 *
 * pgbench -i at --scale (default 20: 2,000,000 accounts), a `note text` column added, then:
 *   (a) a plain loop: UPDATE … WHERE aid BETWEEN k AND k + batch - 1, one transaction per batch,
 *       no checkpoint, no fence — what a script written by hand does;
 *   (b) a change plan's backfill step through a dev server and one `ferry worker` process
 *       (keyset batches, each with its checkpoint in one transaction);
 * each under pgbench's TPC-B at --clients, whose per-transaction latencies (pgbench --log)
 * give p50/p99 during the backfill, against the same pgbench run without one. Prints rows/s
 * and the ratios. Figures, never assertions.
 *
 * Options: --scale N (20), --batch N (5000), --clients N (2), --pg URL (admin URL), --keep.
 */
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FerryClient } from '../src/client';
import { WORKER_PROCESS_ENV } from '../src/config';
import { connectionEnvVar } from '../src/core/names';
import { startDevServer } from '../src/dev/dev-server';
import { databaseUrl, DEFAULT_TEST_PG, ensurePostgres, runSql } from '../src/dev/postgres';
import { findOnPath } from '../src/dev/temporal-binary';
import { RunningProcess, startProcess } from './process';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const SCALE = Number(arg('--scale', '20'));
const BATCH = Number(arg('--batch', '5000'));
const CLIENTS = Number(arg('--clients', '2'));
const ADMIN = arg('--pg', process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);
const KEEP = args.includes('--keep');
const ROOT = join(__dirname, '..');
const PGBENCH = findOnPath('pgbench') ?? '/usr/lib/postgresql/15/bin/pgbench';
const ROWS = SCALE * 100_000;

const url = (db: string) => databaseUrl(ADMIN, db);

function run(cmd: string, argv: string[], env?: NodeJS.ProcessEnv, cwd?: string): RunningProcess {
  return startProcess(cmd, argv, { env, cwd, keep: 50_000 });
}

/** pgbench TPC-B with a per-transaction log, until stopped; then the latencies in ms. */
function writers(db: string): { stop: () => Promise<number[]> } {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-change-'));
  const p = run(PGBENCH, ['-n', '-c', String(CLIENTS), '-j', '1', '-T', '3600', '-b', 'tpcb-like', '--log', '--log-prefix', 'tx', url(db)], process.env, dir);
  return {
    async stop() {
      p.child.kill('SIGINT');
      await p.done;
      const latencies: number[] = [];
      for (const file of readdirSync(dir).filter((f) => f.startsWith('tx'))) {
        for (const line of readFileSync(join(dir, file), 'utf8').split('\n')) {
          const micros = Number(line.split(' ')[2]); // client_id transaction_no time(µs) …
          if (Number.isFinite(micros) && micros > 0) latencies.push(micros / 1000);
        }
      }
      return latencies.sort((a, b) => a - b);
    },
  };
}

const pct = (sorted: number[], p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : NaN);
const ms = (n: number) => `${n.toFixed(1)} ms`;

async function reset(db: string): Promise<void> {
  await runSql(url(db), 'UPDATE public.pgbench_accounts SET note = NULL WHERE note IS NOT NULL');
  await runSql(url(db), 'VACUUM ANALYZE public.pgbench_accounts');
  await runSql(ADMIN, 'CHECKPOINT');
}

async function plainLoop(db: string): Promise<void> {
  for (let k = 1; k <= ROWS; k += BATCH) {
    await runSql(url(db), `UPDATE public.pgbench_accounts SET note = 'n/a' WHERE aid BETWEEN $1 AND $2 AND note IS NULL`, [k, k + BATCH - 1]);
  }
}

async function timedWithWriters(db: string, fn: () => Promise<void>): Promise<{ seconds: number; latencies: number[] }> {
  const load = writers(db);
  const started = Date.now();
  await fn();
  const seconds = (Date.now() - started) / 1000;
  return { seconds, latencies: await load.stop() };
}

async function main(): Promise<void> {
  await ensurePostgres(ADMIN);
  const db = `ferry_bench_change_${Date.now().toString(36)}`;
  await runSql(ADMIN, `CREATE DATABASE ${db}`);
  const server = await startDevServer({ headless: true });
  const env = { ...process.env, TEMPORAL_ADDRESS: server.address, FERRY_LOG_LEVEL: 'warn', [connectionEnvVar('bench')]: url(db) };
  const worker = run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'worker'], { ...env, ...WORKER_PROCESS_ENV });
  const ferry = await FerryClient.connect({ address: server.address });
  try {
    process.stdout.write(`pgbench -i -s ${SCALE} (${ROWS} rows)… `);
    const init = await run(PGBENCH, ['-i', '-q', '-s', String(SCALE), url(db)]).done;
    if (init.code !== 0) throw new Error(init.out);
    await runSql(url(db), 'ALTER TABLE public.pgbench_accounts ADD COLUMN note text');
    await runSql(url(db), 'VACUUM ANALYZE');
    process.stdout.write('done\n');

    const idle = await timedWithWriters(db, () => new Promise((r) => setTimeout(r, 20_000)));
    await reset(db);
    const plain = await timedWithWriters(db, () => plainLoop(db));
    await reset(db);
    let n = 0;
    const viaFerry = await timedWithWriters(db, async () => {
      const { id } = await ferry.startChange({
        kind: 'change',
        id: `bench-${Date.now().toString(36)}-${(n += 1)}`,
        database: 'bench',
        steps: [{ backfill: { table: 'public.pgbench_accounts', set: { note: "'n/a'" }, where: 'note IS NULL', batchRows: BATCH } }],
      });
      const result = await ferry.changeResult(id);
      if (result.state !== 'SUCCEEDED') throw new Error(`the backfill ended ${result.state}: ${JSON.stringify(result.error)}`);
    });

    const line = (name: string, r: { seconds: number; latencies: number[] }, rows?: number) =>
      `${name.padEnd(34)} ${rows ? `${Math.round(rows / r.seconds).toString().padStart(9)} rows/s  ` : ''.padEnd(18)}writers p50 ${ms(pct(r.latencies, 50))}  p99 ${ms(pct(r.latencies, 99))}  max ${ms(r.latencies[r.latencies.length - 1] ?? NaN)}  (${r.latencies.length} tx)\n`;
    process.stdout.write(`\n${ROWS} rows, batches of ${BATCH}, pgbench TPC-B with ${CLIENTS} clients beside it\n`);
    process.stdout.write(line('no backfill (20 s)', idle));
    process.stdout.write(line('plain batched UPDATE loop', plain, ROWS));
    process.stdout.write(line('ferry change plan backfill', viaFerry, ROWS));
    process.stdout.write(`ferry / plain loop: ${(plain.seconds / viaFerry.seconds).toFixed(2)}× the rows per second\n`);
  } finally {
    await ferry.close();
    worker.child.kill('SIGTERM');
    await worker.done;
    await server.stop();
    if (!KEEP) await runSql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench:change: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
