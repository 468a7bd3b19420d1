/**
 * bench:online's view from the application: pgbench (TPC-B) writing through the cutover of an
 * online migration of its tables, once straight at the source (no switch: the freeze refuses its
 * writes and each client ends at its first error, as an application's requests would fail until
 * someone repoints it) and once through a real PgBouncer with `cutover.switch: pgbouncer` and a
 * switch worker beside it. Printed side by side: what pgbench committed, its failed
 * transactions and the clients an error ended, its longest transaction, and Ferry's two outages.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FerryClient } from '../src/client';
import { WORKER_PROCESS_ENV } from '../src/config';
import { connectionEnvVar } from '../src/core/names';
import { startPgBouncer } from '../src/dev/pgbouncer';
import { databaseUrl, runSql } from '../src/dev/postgres';
import { PGBENCH } from './pgbench';
import { runProcess, startProcess } from './process';

export interface ApplicationView {
  label: string;
  state: string;
  /** pgbench's transactions committed, failed (its own count) and clients ended by an error. */
  committed: number;
  failed: number;
  clientsEnded: number;
  clients: number;
  longestMs: number;
  writeOutageMs?: number;
  clientPauseMs?: number;
}

export interface ViewOptions {
  ferry: FerryClient;
  env: NodeJS.ProcessEnv;
  admin: string;
  root: string;
  scale: number;
  clients: number;
  seconds: number;
  tag: string;
}

const HISTORY = 'CREATE TABLE public.pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))';

/**
 * A run's databases and their connection names: the bench's worker is given these connections
 * when it starts (appConnections), before the databases exist.
 */
export function appDatabases(tag: string, withSwitch: boolean): { source: string; target: string; names: { source: string; target: string } } {
  const name = `${withSwitch ? 'sw' : 'direct'}_${tag}`;
  return { source: `ferry_bench_app_src_${name}`, target: `ferry_bench_app_tgt_${name}`, names: { source: `app_src_${name}`, target: `app_tgt_${name}` } };
}

/** FERRY_CONN_* of both runs' databases, for the bench's worker. */
export function appConnections(admin: string, tag: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const withSwitch of [false, true]) {
    const { source, target, names } = appDatabases(tag, withSwitch);
    env[connectionEnvVar(names.source)] = databaseUrl(admin, source);
    env[connectionEnvVar(names.target)] = databaseUrl(admin, target);
  }
  return env;
}

/** One migration under pgbench, with or without the switch; its databases made and dropped here. */
export async function applicationView(o: ViewOptions, withSwitch: boolean): Promise<ApplicationView> {
  const { source, target, names } = appDatabases(o.tag, withSwitch);
  for (const db of [source, target]) await runSql(o.admin, `CREATE DATABASE ${db}`);
  const url = (db: string) => databaseUrl(o.admin, db);
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-switch-'));
  const started: { stop(): Promise<void> }[] = [];
  try {
    const init = await runProcess(PGBENCH, ['-i', '-q', '-s', String(o.scale), url(source)]);
    if (init.code !== 0) throw new Error(init.out);
    await runSql(url(target), HISTORY);
    const queue = `bench-switch-${o.tag}`;
    const env = { ...o.env, ...appConnections(o.admin, o.tag) };
    let writeTo = url(source);
    let cutoverSwitch: Record<string, unknown> | undefined;
    if (withSwitch) {
      const sourceUrl = new URL(url(source));
      const pooler = await startPgBouncer({ app: { host: sourceUrl.hostname, port: Number(sourceUrl.port || 5432), dbname: source } });
      started.push(pooler);
      started.push(await switchWorker(o.root, { ...env, FERRY_CONN_BENCH_POOLADMIN: pooler.adminUrl }, queue));
      writeTo = pooler.url('app');
      cutoverSwitch = { pgbouncer: { admin: 'bench_pooladmin', database: 'app', configFile: pooler.databasesFile, taskQueue: queue } };
    }
    const id = `bench-app-${withSwitch ? 'switch' : 'direct'}-${o.tag}`;
    return await migrateUnderPgbench(o, { source: names.source, target: names.target, writeTo, cutoverSwitch, logPrefix: join(dir, 'tx'), id }, withSwitch);
  } finally {
    for (const s of started.reverse()) await s.stop();
    rmSync(dir, { recursive: true, force: true });
    for (const db of [source, target]) await runSql(o.admin, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

interface Run {
  source: string;
  target: string;
  writeTo: string;
  cutoverSwitch?: Record<string, unknown>;
  logPrefix: string;
  id: string;
}

async function migrateUnderPgbench(o: ViewOptions, r: Run, withSwitch: boolean): Promise<ApplicationView> {
  const spec = {
    source: r.source,
    target: r.target,
    mode: 'online',
    tables: ['public.pgbench_accounts', 'public.pgbench_branches', 'public.pgbench_tellers'],
    cutover: { approval: 'manual', approvalTimeout: '30m', ...(r.cutoverSwitch ? { switch: r.cutoverSwitch } : {}) },
  };
  await o.ferry.start(spec, { id: r.id });
  await until(async () => {
    const status = await o.ferry.status(r.id);
    if (status.endedAt) throw new Error(`${r.id} ended ${status.state} before its approval: ${status.error?.message}`);
    return status.phase === 'AWAITING_APPROVAL';
  });
  const load = startProcess(PGBENCH, ['-n', '-c', String(o.clients), '-j', '1', '-T', String(o.seconds), '-b', 'tpcb-like', '-l', `--log-prefix=${r.logPrefix}`, r.writeTo]);
  // A third of pgbench's time before the approval, the cutover, and the rest after it.
  await new Promise((resolve) => setTimeout(resolve, (o.seconds * 1000) / 3));
  await o.ferry.approve(r.id);
  const result = await o.ferry.result(r.id);
  const bench = await load.done;
  return {
    label: withSwitch ? 'through PgBouncer, switch: pgbouncer' : 'straight at the source, no switch',
    state: result.state,
    committed: Number(/number of transactions actually processed: (\d+)/.exec(bench.out)?.[1] ?? NaN),
    failed: Number(/number of failed transactions: (\d+)/.exec(bench.out)?.[1] ?? 0),
    clientsEnded: (bench.out.match(/client \d+ script \d+ aborted|client \d+ aborted/g) ?? []).length,
    clients: o.clients,
    longestMs: longestLatencyMs(r.logPrefix),
    writeOutageMs: result.cutover?.writeOutageMs,
    clientPauseMs: result.cutover?.clientPauseMs,
  };
}

/** The longest transaction pgbench logged (-l: latency in µs, the third field). */
function longestLatencyMs(logPrefix: string): number {
  const dir = join(logPrefix, '..');
  let longest = 0;
  for (const file of readdirSync(dir).filter((f) => f.startsWith('tx.'))) {
    for (const line of readFileSync(join(dir, file), 'utf8').split('\n')) {
      const fields = line.trim().split(/\s+/);
      if (fields.length >= 6) longest = Math.max(longest, Number(fields[2]) / 1000);
    }
  }
  return longest;
}

async function until(ready: () => Promise<boolean>, timeoutMs = 300_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ready())) {
    if (Date.now() > deadline) throw new Error(`no result within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** A `ferry worker` process with `args`, ready once it logs that it started. */
async function workerProcess(root: string, env: NodeJS.ProcessEnv, args: string[]): Promise<{ stop(): Promise<void> }> {
  const { child, done } = startProcess(process.execPath, [join(root, 'bin', 'ferry.js'), 'worker', ...args], { env: { ...env, ...WORKER_PROCESS_ENV, FERRY_LOG_LEVEL: 'info' }, keep: 20_000 });
  let out = '';
  // The worker logs to stderr.
  for (const stream of [child.stdout!, child.stderr!]) stream.on('data', (d) => (out += d));
  await until(async () => {
    if (child.exitCode !== null) throw new Error(`worker exited: ${out}`);
    return out.includes('"msg":"worker started"');
  }, 60_000);
  return {
    async stop() {
      child.kill('SIGTERM');
      await done;
    },
  };
}

const switchWorker = (root: string, env: NodeJS.ProcessEnv, queue: string) => workerProcess(root, env, ['--task-queue', queue]);

/** The two runs side by side. */
export function printViews(views: ApplicationView[]): void {
  const ms = (v: number | undefined) => (v === undefined ? '—' : `${Math.round(v).toLocaleString('en')} ms`);
  process.stdout.write(`\nthe application's view of the cutover (pgbench -c ${views[0]?.clients}, TPC-B):\n`);
  for (const v of views) {
    process.stdout.write(
      `  ${v.label.padEnd(38)} ${v.state}: ${v.committed.toLocaleString('en')} committed, ${v.failed} failed, ${v.clientsEnded} of ${v.clients} clients ended by an error; ` +
        `longest transaction ${ms(v.longestMs)}; write outage ${ms(v.writeOutageMs)}, application paused ${ms(v.clientPauseMs)}\n`,
    );
  }
}
