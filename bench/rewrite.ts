/**
 * `npm run bench:rewrite` — a change plan's rewrite step (abalance int → bigint, filler dropped,
 * by shadow copy and swap) against a plain `ALTER TABLE … ALTER COLUMN abalance TYPE bigint`, and
 * what either does to pgbench's TPC-B writers beside it, on this machine.
 *
 * pgbench -i at --scale (default 10: 1,000,000 accounts), then, each on a fresh pgbench -i:
 *   (a) the plain ALTER: its duration is the time it holds ACCESS EXCLUSIVE (every writer waits);
 *   (b) the rewrite step through a dev server and one `ferry worker` process, approval auto;
 * under pgbench at --clients, whose per-transaction log gives TPS, p50/p99 and the longest
 * transaction (the writers' stall). Figures, never assertions.
 *
 * Options: --scale N (10), --clients N (2), --pg URL (admin URL), --keep.
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
const SCALE = Number(arg('--scale', '10'));
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
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-rewrite-'));
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

async function init(db: string): Promise<void> {
  const r = await run(PGBENCH, ['-i', '-q', '-s', String(SCALE), url(db)]).done;
  if (r.code !== 0) throw new Error(r.out);
  await runSql(url(db), 'VACUUM ANALYZE');
  await runSql(ADMIN, 'CHECKPOINT');
}

async function timedWithWriters(db: string, fn: () => Promise<string | void>): Promise<{ seconds: number; latencies: number[]; note?: string }> {
  const load = writers(db);
  await new Promise((r) => setTimeout(r, 2_000));
  const started = Date.now();
  const note = await fn();
  const seconds = (Date.now() - started) / 1000;
  await new Promise((r) => setTimeout(r, 2_000));
  return { seconds, latencies: await load.stop(), note: note ?? undefined };
}

async function main(): Promise<void> {
  await ensurePostgres(ADMIN);
  const db = `ferry_bench_rewrite_${Date.now().toString(36)}`;
  await runSql(ADMIN, `CREATE DATABASE ${db}`);
  const server = await startDevServer({ headless: true });
  const env = { ...process.env, TEMPORAL_ADDRESS: server.address, FERRY_LOG_LEVEL: 'warn', [connectionEnvVar('bench')]: url(db) };
  const worker = run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'worker'], { ...env, ...WORKER_PROCESS_ENV });
  const ferry = await FerryClient.connect({ address: server.address });
  try {
    process.stdout.write(`pgbench -i -s ${SCALE} (${ROWS} rows)… `);
    await init(db);
    process.stdout.write('done\n');
    const idle = await timedWithWriters(db, () => new Promise((r) => setTimeout(r, 15_000)));
    const plain = await timedWithWriters(db, async () => {
      await runSql(url(db), 'ALTER TABLE public.pgbench_accounts ALTER COLUMN abalance TYPE bigint, DROP COLUMN filler');
    });
    await init(db);
    const rewrite = await timedWithWriters(db, async () => {
      const { id } = await ferry.startChange({
        kind: 'change',
        id: `bench-rewrite-${Date.now().toString(36)}`,
        database: 'bench',
        steps: [{ rewrite: { table: 'public.pgbench_accounts', alter: ['ALTER COLUMN abalance TYPE bigint', 'DROP COLUMN filler'], columns: { abalance: 'abalance::bigint' }, keepOld: '1m' } }],
      });
      const result = await ferry.changeResult(id);
      if (result.state !== 'SUCCEEDED') throw new Error(`the rewrite ended ${result.state}: ${JSON.stringify(result.error)}`);
      const swapped = result.events.find((e) => e.type === 'RewriteSwapped');
      return `swap held writers ${String(swapped?.detail?.lockedMs)} ms`;
    });

    const line = (name: string, r: { seconds: number; latencies: number[]; note?: string }, window: number) =>
      `${name.padEnd(30)} ${r.seconds.toFixed(1).padStart(6)} s  writers ${(r.latencies.length / window).toFixed(0).padStart(5)} TPS  p50 ${ms(pct(r.latencies, 50))}  p99 ${ms(pct(r.latencies, 99))}  max ${ms(r.latencies[r.latencies.length - 1] ?? NaN)}${r.note ? `  (${r.note})` : ''}\n`;
    process.stdout.write(`\n${ROWS} rows, pgbench TPC-B with ${CLIENTS} clients beside it (TPS over the operation plus 2 s either side)\n`);
    process.stdout.write(line('no change (15 s)', idle, idle.seconds + 4));
    process.stdout.write(line('plain ALTER … TYPE bigint', plain, plain.seconds + 4));
    process.stdout.write(line('ferry rewrite step', rewrite, rewrite.seconds + 4));
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
    process.stderr.write(`bench:rewrite: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
