/**
 * `npm run bench:copy` — copy throughput against PostgreSQL's own COPY, on this machine.
 *
 * Creates a table of ROWS rows (bigint key, int, text, numeric(12,2), two md5 texts,
 * timestamptz; about 300 MB at 2,000,000 rows) in a fresh source database, then times, in one run:
 *   (a) psql "COPY … TO STDOUT (FORMAT binary)" | psql "COPY … FROM STDIN (FORMAT binary)"
 *       into a table that has its primary key (as Ferry's target has during the load);
 *   (b) pgcopydb clone --table-jobs 2, when pgcopydb is installed;
 *   (c) ferry start --wait with validation none (read by key ranges), again with checksum (a
 *       validated table of this size is read by ranges of blocks), and again with none and
 *       one chunk at a time (`parallelism.chunks: 1`, where the default copies two at once), the
 *       three taking turns, through a dev server and one `ferry worker` process, whose peak RSS
 *       (VmHWM) it reports for each part of the run.
 *   (a') the same pipe into the table without its key, then ALTER TABLE … ADD PRIMARY KEY: the
 *       index-free load Ferry does, at PostgreSQL's own speed;
 *   (a2) the same as (a') with two pipes at once, each half of the key range: what a second
 *       stream buys on this machine;
 *   (k2) and (b2): the copy read two ways, in two pipes at once of batches of BATCH_ROWS rows
 *       each into the keyless table: by key ranges (`id > a AND id <= b`, an index range scan,
 *       as Ferry's keyset batches read) and by block ranges (`ctid >= '(p,0)' AND ctid <
 *       '(q,0)'`, a TID range scan, as a table without a key could be read): whether reading by
 *       blocks is also faster for a keyed table in full mode, where the source is not written;
 *       the plan of one batch of each is printed (--ranges-only: seeding and these two only;
 *       --shuffled: the rows stored in no order of their key, as after years of updates);
 *   (a'') ANALYZE of that table, which Ferry also runs after a table's key;
 *   (s) a plain checksum scan of both sides at once (count and sum of row hashes): what
 *       validation must at least cost;
 *   (f) fixed costs: `ferry --help` (the CLI starting) and `ferry validate --connect` (the CLI
 *       and the preflight helper workflow on the large table), what a run spends outside it;
 *       with (a')/(a2) and (a''), the floors no Ferry run can go below here (PostgreSQL's, and
 *       with the CLI starting), against (a') and pgcopydb;
 *   (m) orchestration: ferry (validation none, the tables chosen by pattern) over 50 tables of
 *       40,000 rows, 500 tables of 100 rows, 2,000 tables of 50 rows and 10,000 tables of 50 rows
 *       (small tables copied in groups; past 500 tables the plan is stored on the target), with
 *       parallelism.tables at its default (2) and at --many-parallelism (8), and at that with
 *       `objects: all` (each table has a view and a comment, which pgcopydb moves too; for the
 *       shapes whose tables the server's lock table has room for, see --objects-shapes), against
 *       pgcopydb on the same tables, with the parent's history (events, bytes) and where the time
 *       went (the result's timeline: preflight, prepare — the first pass of `objects: all` in it —,
 *       tables, objects — the second pass) after each kind of run, and the worker's peak RSS over
 *       the runs without objects and over the one with, and pgcopydb's peak memory (a clone that
 *       leaves the machine under 2 GB available is stopped, and that is its result); 10,000 tables
 *       once each, not --repeat times (skip them all with --no-many; --shapes 2000,10000 picks some).
 * Each is run --repeat times (default 3) into a fresh target; the median is reported with the
 * range. Prints rows/s and the ratios ferry/raw, ferry/index-free raw and ferry/pgcopydb.
 * Figures, never assertions.
 *
 * Options: --rows N (default 2000000), --repeat N (3), --pg URL (admin URL), --keep, --no-many, --shapes N,N,
 * --ranges-only, --shuffled,
 * --many-parallelism N (8), --temporal-defaults (the dev server with Temporal's own task-queue
 * read rates instead of Ferry's, to see what those cost),
 * --locks N (instead of --pg: every part on a private PostgreSQL 15 cluster in a temporary
 * directory, set as the shared server is — shared_buffers 128 MB, fsync on, autovacuum off — but
 * for max_locks_per_transaction N; started here, removed at the end, the shared server untouched),
 * --objects-shapes N,N (the (m) shapes, by their tables, also run with `objects: all`; by default
 * each whose tables the server's lock table has room for by preflight's rule — pg_dump locks every
 * table it dumps in one transaction, and preflight refuses more than three quarters of
 * max_locks_per_transaction × (max_connections + max_prepared_transactions): 4,800 tables on a
 * server of the defaults, so the 10,000-table shape runs with `objects: all` from --locks 192 on;
 * a shape chosen past that is refused, which the bench prints as its result).
 *
 * The 10,000 tables with `objects: all` and pgcopydb beside them (pgcopydb restores its schema in
 * one transaction, which needed more than 256 locks a session here):
 *   npm run bench:copy -- --rows 20000 --repeat 1 --shapes 10000 --locks 1024
 */
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findOnPath } from '../src/dev/temporal-binary';
import { ProcessResult, runProcess, startProcess } from './process';
import { peakRssSince } from './rss';
import { databaseUrl, DEFAULT_TEST_PG, ensurePostgres, runSql } from '../src/dev/postgres';
import { startDevServer, TEMPORAL_DEFAULT_DYNAMIC_CONFIG } from '../src/dev/dev-server';
import { WORKER_PROCESS_ENV } from '../src/config';
import { connectionEnvVar } from '../src/core/names';
import { Client, Connection } from '@temporalio/client';
import { PrivateCluster, startPrivateCluster } from '../src/dev/pg-cluster';
import { DUMP_LOCK_SHARE } from '../src/db/object-passes';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const ROWS = Number(arg('--rows', '2000000'));
/** max_locks_per_transaction of a private cluster the bench runs on (--locks), instead of --pg's server. */
const LOCKS = args.includes('--locks') ? Number(arg('--locks', '')) : undefined;
/** The admin URL: --pg's, or (--locks) the private cluster's once main has started it. */
let ADMIN = arg('--pg', process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);
const KEEP = args.includes('--keep');
const REPEAT = Number(arg('--repeat', '3'));
const MANY = !args.includes('--no-many');
/** Seed, then only (k2) and (b2): the key-range against block-range reading. */
const RANGES_ONLY = args.includes('--ranges-only');
/** Rows stored in no order of their key (as after years of updates), not in key order. */
const SHUFFLED = args.includes('--shuffled');
/** Rows a batch of (k2) and (b2); block ranges are sized to hold about as many. */
const BATCH_ROWS = 250_000;
/** Temporal's defaults (20 reads a second) for what Ferry's dev server changes. */
const DEV_SERVER = args.includes('--temporal-defaults') ? { dynamicConfig: TEMPORAL_DEFAULT_DYNAMIC_CONFIG } : {};
/** parallelism.tables of the second Ferry run over many tables (the first runs at the default). */
const MANY_PARALLELISM = Number(arg('--many-parallelism', '8'));
/**
 * The shapes also run with `objects: all`, by their tables (--objects-shapes); unset, those whose
 * tables the server's lock table has room for (dumpRoom).
 */
const OBJECTS_SHAPES = args.includes('--objects-shapes') ? arg('--objects-shapes', '').split(',').map(Number) : undefined;
/**
 * The orchestration runs: tables × rows each. 10,000 tables run once (not --repeat times):
 * pgcopydb alone takes minutes.
 */
const MANY_SHAPES: readonly { tables: number; rows: number; once?: boolean }[] = [
  { tables: 50, rows: 40_000 },
  { tables: 500, rows: 100 },
  { tables: 2000, rows: 50 },
  { tables: 10_000, rows: 50, once: true },
].filter((shape) => !args.includes('--shapes') || arg('--shapes', '').split(',').map(Number).includes(shape.tables));
const ROOT = join(__dirname, '..');
const PSQL = findOnPath('psql') ?? '/usr/bin/psql';

const TABLE_DDL = `CREATE TABLE public.bench_rows (
  id bigint PRIMARY KEY, account int NOT NULL, label text, amount numeric(12,2),
  h1 text, h2 text, created_at timestamptz)`;

const url = (db: string) => databaseUrl(ADMIN, db);
const sql = runSql;

/** "12% less time" or "3% more time": `ms` against `base`. */
function lessOrMore(ms: number, base: number): string {
  const percent = Math.round((1 - ms / base) * 100);
  return percent >= 0 ? `${percent}% less time` : `${-percent}% more time`;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}

interface Sample {
  median: number;
  min: number;
  max: number;
}

/** Runs `fresh` (untimed set-up), `fn` (timed) and `check` (untimed) REPEAT times. */
async function repeated(fresh: () => Promise<void>, fn: () => Promise<void>, check: () => Promise<void> = async () => undefined, rounds = REPEAT): Promise<Sample> {
  const times: number[] = [];
  for (let i = 0; i < rounds; i += 1) {
    await fresh();
    await sql(ADMIN, 'CHECKPOINT');
    times.push(await timed(fn));
    await check();
  }
  return sampleOf(times);
}

function sampleOf(values: number[]): Sample {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)], min: sorted[0], max: sorted[sorted.length - 1] };
}

function line(label: string, s: Sample, rows = ROWS): string {
  const range = REPEAT > 1 ? `  (${seconds(s.min)}–${seconds(s.max)})` : '';
  return `${label.padEnd(42)} ${seconds(s.median).padStart(8)}  ${(rows > 0 ? rate(s.median, rows) : '').padStart(16)}${range}\n`;
}

async function recreate(db: string): Promise<void> {
  await sql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await sql(ADMIN, `CREATE DATABASE ${db}`);
}

function rate(ms: number, rows = ROWS): string {
  return `${Math.round(rows / (ms / 1000)).toLocaleString('en-US')} rows/s`;
}

async function timed(fn: () => Promise<void>): Promise<number> {
  const started = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - started) / 1e6;
}

function run(command: string, argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<ProcessResult> {
  return runProcess(command, argv, { env });
}

/**
 * The machine's available memory (MB) under which a pgcopydb run is stopped: at 10,000 tables
 * pgcopydb 0.10 grew past 20 GB of the machine's 23 here (its processes' proportional set) and
 * was still growing — the machine's other processes would have been the ones killed.
 */
const PGCOPYDB_MEMORY_FLOOR_MB = 2048;

/** A pgcopydb run: its output and exit, its peak memory (MB, its processes' PSS summed), and why the bench stopped it, if it did. */
interface PgcopydbRun extends ProcessResult {
  peakMb: number;
  stopped?: string;
}

/**
 * pgcopydb, in a process group of its own (ProcessOptions.ownGroup), its memory read every 2 s
 * and its group stopped (SIGTERM) when the machine's available memory falls under
 * PGCOPYDB_MEMORY_FLOOR_MB.
 */
async function runPgcopydb(pgcopydb: string, argv: string[]): Promise<PgcopydbRun> {
  const { child, done } = startProcess(pgcopydb, argv, { ownGroup: true });
  const started = Date.now();
  let peakMb = 0;
  let stopped: string | undefined;
  const watch = setInterval(() => {
    const mb = groupPssMb(child.pid!);
    peakMb = Math.max(peakMb, mb);
    const available = availableMemoryMb();
    if (stopped || available >= PGCOPYDB_MEMORY_FLOOR_MB) return;
    stopped = `stopped by the bench after ${seconds(Date.now() - started)} at ${(mb / 1024).toFixed(1)} GB (the machine had ${available} MB left)`;
    process.kill(-child.pid!, 'SIGTERM');
  }, 2000);
  try {
    return { ...(await done), peakMb, stopped };
  } finally {
    clearInterval(watch);
  }
}

/** /proc/meminfo's MemAvailable, in MB. */
function availableMemoryMb(): number {
  return Math.round(Number(/MemAvailable:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0) / 1024);
}

/** The proportional set (PSS: shared pages split among their sharers) of a process group's processes, summed, in MB. */
function groupPssMb(group: number): number {
  let kb = 0;
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      // The process group is the fifth field of stat, after the command in parentheses.
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      if (Number(fields[2]) !== group) continue;
      kb += Number(/^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))?.[1] ?? 0);
    } catch {
      // Gone meanwhile.
    }
  }
  return Math.round(kb / 1024);
}

/**
 * From `ferry start --wait --json` output: the result's timeline (ms per step of the migration
 * workflow), and what the run spent outside it (CLI start, the preflight helper, the wait for the
 * result) out of `totalMs`.
 */
function timelineText(out: string, totalMs: number): string {
  const result = JSON.parse(out.slice(out.indexOf('{\n'))) as { timeline?: { step: string; startedAt: string; endedAt?: string; ms?: number }[] };
  const steps = result.timeline ?? [];
  if (steps.length === 0) return 'no timeline in the result';
  const inWorkflow = Date.parse(steps.at(-1)!.endedAt ?? steps.at(-1)!.startedAt) - Date.parse(steps[0].startedAt);
  return `${steps.map((t) => `${t.step} ${t.ms ?? '?'} ms`).join(', ')}; outside the workflow ${totalMs - inWorkflow} ms of ${totalMs} ms`;
}

/** From `ferry start --wait --json` output: milliseconds from MigrationStarted to the last TableCopied. */
function copyPhaseMs(out: string): number {
  const result = JSON.parse(out.slice(out.indexOf('{\n'))) as { events: { type: string; at: string }[] };
  const at = (type: string) => result.events.filter((e) => e.type === type).map((e) => Date.parse(e.at));
  return Math.max(...at('TableCopied')) - Math.min(...at('MigrationStarted'));
}

/**
 * (k2) and (b2): the keyless table loaded in two pipes at once, each a run of batches read by key
 * range, then by block range, the batches' bounds planned beforehand (as Ferry plans chunks).
 */
async function keyAndBlockRanges(
  dbs: { source: string; raw: string },
  rawPipe: (source: string) => string,
  keylessTable: () => Promise<void>,
): Promise<{ keys: Sample; blocks: Sample }> {
  const batches = Math.max(2, Math.ceil(ROWS / BATCH_ROWS));
  const [size] = await sql(url(dbs.source), `SELECT (pg_relation_size('public.bench_rows') / current_setting('block_size')::int)::int AS blocks`);
  const blocks = Number(size.blocks);
  const keyRange = (i: number) => `id > ${Math.floor((ROWS * i) / batches)} AND id <= ${Math.floor((ROWS * (i + 1)) / batches)}`;
  const blockRange = (i: number) =>
    `ctid >= '(${Math.floor((blocks * i) / batches)},0)'::tid` + (i === batches - 1 ? '' : ` AND ctid < '(${Math.floor((blocks * (i + 1)) / batches)},0)'::tid`);
  const loaded = async () => {
    const [a, b] = await Promise.all([sql(url(dbs.source), 'SELECT count(*)::int AS n FROM public.bench_rows'), sql(url(dbs.raw), 'SELECT count(*)::int AS n FROM public.bench_rows')]);
    if (a[0].n !== b[0].n) throw new Error(`the ranges copied ${b[0].n} rows of ${a[0].n}`);
  };
  const twoPipes = (range: (i: number) => string) => async () => {
    // Pipe one takes the even batches, pipe two the odd ones, each in order.
    const pipe = (first: number) =>
      Array.from({ length: batches }, (_, i) => i)
        .filter((i) => i % 2 === first)
        .map((i) => `( ${rawPipe(`(SELECT * FROM public.bench_rows WHERE ${range(i)})`)} )`)
        .join(' && ');
    // Spaced: "((" would open an arithmetic command in bash (it did, with one batch a pipe).
    const r = await run('bash', ['-o', 'pipefail', '-c', `( ${pipe(0)} ) & first=$!; ${pipe(1)}; second=$?; wait $first && exit $second`]);
    if (r.code !== 0) throw new Error(`copy by ranges failed: ${r.out}`);
  };
  for (const [label, range] of [['key', keyRange], ['block', blockRange]] as const) {
    const [plan] = await sql(url(dbs.source), `EXPLAIN (FORMAT JSON) SELECT * FROM public.bench_rows WHERE ${range(1)}`);
    process.stdout.write(`  a ${label}-range batch reads by ${(plan['QUERY PLAN'] as { Plan: { 'Node Type': string } }[])[0].Plan['Node Type']}\n`);
  }
  const keys = await repeated(keylessTable, twoPipes(keyRange), loaded);
  process.stdout.write(line(`(k2) two pipes of ${batches} key-range batches in all`, keys));
  const blocksSample = await repeated(keylessTable, twoPipes(blockRange), loaded);
  process.stdout.write(line(`(b2) two pipes of ${batches} block-range batches in all`, blocksSample));
  return { keys, blocks: blocksSample };
}

/**
 * --locks: a private cluster set as the shared server is but for its lock table, which the bench
 * runs on (ADMIN becomes its URL); undefined without --locks.
 */
async function privateCluster(): Promise<PrivateCluster | undefined> {
  if (LOCKS === undefined) return undefined;
  if (args.includes('--pg')) throw new Error('give --pg or --locks, not both: --locks starts a server of its own');
  if (!(LOCKS >= 10)) throw new Error(`--locks takes max_locks_per_transaction (10 or more), not ${arg('--locks', '')}`);
  const cluster = await startPrivateCluster({ max_locks_per_transaction: String(LOCKS), shared_buffers: "'128MB'", fsync: 'on', autovacuum: 'off' }, 'ferry-bench-');
  ADMIN = cluster.url;
  process.stdout.write(`on a private cluster at ${ADMIN}, max_locks_per_transaction ${LOCKS}\n`);
  return cluster;
}

async function main(): Promise<void> {
  const cluster = await privateCluster();
  try {
    await bench();
  } finally {
    await cluster?.stop();
  }
}

async function bench(): Promise<void> {
  await ensurePostgres(ADMIN);
  const tag = Date.now().toString(36);
  const dbs = {
    source: `ferry_bench_src_${tag}`,
    raw: `ferry_bench_raw_${tag}`,
    pgcopydb: `ferry_bench_pgcopydb_${tag}`,
    none: `ferry_bench_none_${tag}`,
    checksum: `ferry_bench_sum_${tag}`,
    many: `ferry_bench_many_${tag}`,
    manyTarget: `ferry_bench_manyt_${tag}`,
  };
  for (const db of Object.values(dbs)) await sql(ADMIN, `CREATE DATABASE ${db}`);
  const results: Record<string, Sample> = {};
  const copyPhase: Record<string, number> = {};
  const many: ManyResult[] = [];
  /** The worker's peak RSS over each part of the run, by part. */
  const rss: Record<string, number> = {};
  /** `ferry --help`: the CLI starting, which every run does first. */
  let cli: Sample | undefined;
  try {
    process.stdout.write(`seeding ${ROWS.toLocaleString('en-US')} rows… `);
    await sql(url(dbs.source), `${TABLE_DDL};
      INSERT INTO public.bench_rows SELECT g, g % 100000, 'label ' || g, (g % 1000000) / 100.0, md5(g::text), md5((g * 7)::text),
             '2020-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, ${ROWS}) g${SHUFFLED ? ' ORDER BY md5(g::text)' : ''}`);
    await sql(url(dbs.source), 'VACUUM ANALYZE public.bench_rows');
    const [size] = await sql(url(dbs.source), `SELECT pg_size_pretty(pg_table_size('public.bench_rows')) AS s`);
    process.stdout.write(`done (${size.s})\n\n`);

    /** psql to psql: `source` (a table or a parenthesised SELECT) in binary COPY into the raw target's table. */
    const rawPipe = (source: string) =>
      `${PSQL} -X -q "${url(dbs.source)}" -c "COPY ${source} TO STDOUT (FORMAT binary)" | ${PSQL} -X -q "${url(dbs.raw)}" -c "COPY public.bench_rows FROM STDIN (FORMAT binary)"`;
    const keylessTable = async () => {
      await recreate(dbs.raw);
      await sql(url(dbs.raw), TABLE_DDL.replace(' PRIMARY KEY', ''));
    };

    const ranges = await keyAndBlockRanges(dbs, rawPipe, keylessTable);
    if (RANGES_ONLY) {
      process.stdout.write(`\nblock ranges / key ranges (b2 / k2):      ${(ranges.blocks.median / ranges.keys.median).toFixed(2)} × the time\n`);
      return;
    }

    // (a) raw binary COPY, psql to psql, into a table with its primary key.
    const raw = await repeated(
      async () => {
        await recreate(dbs.raw);
        await sql(url(dbs.raw), TABLE_DDL);
      },
      async () => {
        const r = spawnSync('bash', ['-o', 'pipefail', '-c', rawPipe('public.bench_rows')]);
        if (r.status !== 0) throw new Error(`raw COPY failed: ${r.stderr}`);
      },
    );
    process.stdout.write(line('(a) raw COPY (binary, psql | psql)', raw));

    // (a') the same pipe into a table without its key, then the key: the index-free load.
    const rawIndexFree = await repeated(
      keylessTable,
      async () => {
        const r = spawnSync('bash', ['-o', 'pipefail', '-c', rawPipe('public.bench_rows')]);
        if (r.status !== 0) throw new Error(`raw COPY failed: ${r.stderr}`);
        await sql(url(dbs.raw), 'ALTER TABLE public.bench_rows ADD PRIMARY KEY (id)');
      },
    );
    process.stdout.write(line("(a') raw COPY without key, then ADD PRIMARY KEY", rawIndexFree));

    // (a2) (a') in two pipes at once, each half of the key range (through the source's key).
    const half = Math.floor(ROWS / 2);
    const rawTwoPipes = await repeated(
      keylessTable,
      async () => {
        const pipe = (where: string) => rawPipe(`(SELECT * FROM public.bench_rows WHERE ${where})`);
        const r = await run('bash', ['-o', 'pipefail', '-c', `(${pipe(`id <= ${half}`)}) & first=$!; ${pipe(`id > ${half}`)}; second=$?; wait $first && exit $second`]);
        if (r.code !== 0) throw new Error(`raw COPY in two pipes failed: ${r.out}`);
        await sql(url(dbs.raw), 'ALTER TABLE public.bench_rows ADD PRIMARY KEY (id)');
      },
    );
    process.stdout.write(line("(a2) (a') in two pipes at once", rawTwoPipes));

    // (a'') ANALYZE of what (a') loaded: Ferry analyzes every table it loads, after its key (the
    // two cannot overlap: their locks conflict), so (a') plus this is the same work done serially.
    const analyze = await repeated(async () => undefined, async () => {
      await sql(url(dbs.raw), 'ANALYZE public.bench_rows');
    });
    process.stdout.write(line("(a'') ANALYZE of the table (a') loaded", analyze));

    // (s) a plain checksum scan of both sides at once (the raw target holds the same rows now).
    const CHECKSUM = 'SELECT count(*) AS n, sum(hashtext(t::text)::bigint) AS h FROM public.bench_rows t';
    const scan = await repeated(
      async () => undefined,
      async () => {
        const [a, b] = await Promise.all([sql(url(dbs.source), CHECKSUM), sql(url(dbs.raw), CHECKSUM)]);
        if (a[0].n !== b[0].n || a[0].h !== b[0].h) throw new Error('the plain checksum scan found the sides different');
      },
    );
    process.stdout.write(line('(s) plain checksum scan, both sides at once', scan));

    // (b) pgcopydb, when installed.
    const pgcopydb = findOnPath('pgcopydb');
    let copydb: Sample | undefined;
    if (pgcopydb) {
      const work = join(tmpdir(), `ferry-bench-pgcopydb-${tag}`);
      copydb = await repeated(
        () => recreate(dbs.pgcopydb),
        async () => {
          const r = await runPgcopydb(pgcopydb, ['clone', '--source', url(dbs.source), '--target', url(dbs.pgcopydb), '--table-jobs', '2', '--index-jobs', '2', '--dir', work, '--no-owner', '--no-acl', '--skip-extensions', '--restart']);
          if (r.code !== 0) throw new Error(`pgcopydb failed: ${r.out.slice(-2000)}`);
        },
      );
      process.stdout.write(line('(b) pgcopydb clone --table-jobs 2', copydb));
    } else {
      process.stdout.write('(b) pgcopydb: not installed (apt-get install pgcopydb), skipped\n');
    }

    // (c) ferry, one worker process, through a dev server.
    const server = await startDevServer({ headless: true, ...DEV_SERVER });
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      TEMPORAL_ADDRESS: server.address,
      FERRY_LOG_LEVEL: 'warn',
      [connectionEnvVar('bench_src')]: url(dbs.source),
      [connectionEnvVar('bench_none')]: url(dbs.none),
      [connectionEnvVar('bench_sum')]: url(dbs.checksum),
      [connectionEnvVar('bench_many')]: url(dbs.many),
      [connectionEnvVar('bench_many_t')]: url(dbs.manyTarget),
    };
    const worker = spawn(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'worker'], { env: { ...env, ...WORKER_PROCESS_ENV }, stdio: ['ignore', 'ignore', 'pipe'] });
    let workerLog = '';
    worker.stderr.on('data', (d) => (workerLog = (workerLog + d).slice(-5000)));
    worker.on('exit', (code) => {
      if (code !== null && code !== 0) {
        process.stderr.write(`bench: the ferry worker exited with ${code}:\n${workerLog}\n`);
        process.exit(1);
      }
    });
    try {
      // Warm-up: bundle workflows, open connections and run the copy path before timing — on a
      // tenth of the table (a one-row warm-up left the first timed run about a second slower).
      const warm = join(tmpdir(), `ferry-bench-warm-${tag}.json`);
      await sql(url(dbs.source), `CREATE TABLE public.warm (LIKE public.bench_rows INCLUDING ALL); INSERT INTO public.warm SELECT * FROM public.bench_rows WHERE id <= ${Math.ceil(ROWS / 10)}`);
      writeFileSync(warm, JSON.stringify({ source: 'bench_src', target: 'bench_none', tables: ['public.warm'] }));
      const w = await run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'start', warm, '--wait'], env);
      if (w.code !== 0) throw new Error(`warm-up failed: ${w.out}\n${workerLog}`);
      await sql(url(dbs.none), 'DROP TABLE public.warm');
      await sql(url(dbs.source), 'DROP TABLE public.warm');
      rss['start and warm-up'] = peakRssSince(worker.pid!);

      // Ferry's runs on the large table take turns (none, checksum, none one chunk at a time;
      // REPEAT rounds), so a drift in the machine's speed falls on all three alike. The third
      // shows what the default's second chunk stream buys here.
      const variants = (
        [
          { name: 'none', target: 'bench_none', validation: 'none', label: '(c) ferry start --wait, validation none' },
          { name: 'checksum', target: 'bench_sum', validation: 'checksum', label: '(c) ferry start --wait, validation checksum (copied by blocks)' },
          { name: 'none-one-chunk', target: 'bench_none', validation: 'none', parallelism: { chunks: 1 }, label: '(c) ferry, validation none, one chunk at a time' },
        ] as const
      ).map((v) => {
        const specFile = join(tmpdir(), `ferry-bench-${v.name}-${tag}.json`);
        const parallelism = 'parallelism' in v ? { parallelism: v.parallelism } : {};
        writeFileSync(specFile, JSON.stringify({ source: 'bench_src', target: v.target, validation: v.validation, tables: ['public.bench_rows'], ...parallelism }));
        return { ...v, db: v.target === 'bench_none' ? dbs.none : dbs.checksum, specFile, times: [] as number[], phases: [] as number[], timelines: [] as string[] };
      });
      for (let round = 0; round < REPEAT; round += 1) {
        for (const v of variants) {
          await recreate(v.db);
          await sql(ADMIN, 'CHECKPOINT');
          let out = '';
          const ms = await timed(async () => {
            const r = await run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'start', v.specFile, '--wait', '--json'], env);
            if (r.code !== 0) throw new Error(`ferry failed: ${r.out}\n${workerLog}`);
            out = r.out;
          });
          v.times.push(ms);
          v.phases.push(copyPhaseMs(out));
          v.timelines.push(timelineText(out, Math.round(ms)));
          const [count] = await sql(url(v.db), 'SELECT count(*)::int AS n FROM public.bench_rows');
          if (count.n !== ROWS) throw new Error(`ferry copied ${count.n} rows, expected ${ROWS}`);
        }
      }
      for (const v of variants) {
        results[v.name] = sampleOf(v.times);
        process.stdout.write(line(v.label, results[v.name]));
        process.stdout.write(`      where each run's time went: ${v.timelines.join('\n                                  ')}\n`);
        copyPhase[v.name] = sampleOf(v.phases).median;
      }
      rss[`${ROWS.toLocaleString('en-US')} rows (the three runs)`] = peakRssSince(worker.pid!);
      // What "outside the workflow" above is made of: a CLI call that sends nothing, and one that
      // also runs the preflight helper workflow on the worker (the large table's plan) and stops.
      await recreate(variants[0].db); // preflight refuses a target table that has rows
      const ferryCall = (argv: string[]) => async () => {
        const r = await run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), ...argv], env);
        if (r.code !== 0) throw new Error(`ferry ${argv.join(' ')} exited ${r.code}: ${r.out}`);
      };
      cli = await repeated(async () => undefined, ferryCall(['--help']));
      const preflight = await repeated(async () => undefined, ferryCall(['validate', variants[0].specFile, '--connect']));
      process.stdout.write(line('(f) ferry --help (the CLI starting)', cli, 0));
      process.stdout.write(line('(f) ferry validate --connect (+ preflight)', preflight, 0));
      if (MANY) many.push(...(await manyTables(dbs.many, dbs.manyTarget, env, pgcopydb ?? undefined, (label) => {
        const mb = peakRssSince(worker.pid!);
        if (label) rss[label] = mb;
      })));
    } finally {
      worker.kill('SIGTERM');
      await new Promise((r) => worker.on('exit', r));
      await server.stop();
    }

    const ratio = (base: Sample, mine: Sample) => (base.median / mine.median).toFixed(2);
    process.stdout.write('\n');
    process.stdout.write(`ferry (validation none) / raw COPY:      ${ratio(raw, results.none)} × raw throughput\n`);
    process.stdout.write(`ferry (validation none) time / (a'):     ${(results.none.median / rawIndexFree.median).toFixed(2)} × the index-free load's time\n`);
    process.stdout.write(
      `ferry (validation none) time / (a'+a''):${(results.none.median / (rawIndexFree.median + analyze.median)).toFixed(2)} × the index-free load's time with ANALYZE\n`,
    );
    process.stdout.write(
      `checksum run over none (blocks vs keys):  ${seconds(results.checksum.median - results.none.median)}, ` +
        `${((results.checksum.median - results.none.median) / scan.median).toFixed(2)} × one plain two-sided scan\n`,
    );
    process.stdout.write(`ferry (validation checksum) / raw COPY:  ${ratio(raw, results.checksum)} × raw throughput\n`);
    process.stdout.write(`two chunks at once / one (ferry, none):  ${(results.none.median / results['none-one-chunk'].median).toFixed(2)} × the time\n`);
    process.stdout.write(`two raw pipes at once / one (a2 / a'):   ${(rawTwoPipes.median / rawIndexFree.median).toFixed(2)} × the time\n`);
    process.stdout.write(`block ranges / key ranges (b2 / k2):      ${(ranges.blocks.median / ranges.keys.median).toFixed(2)} × the time\n`);
    if (copydb) process.stdout.write(`ferry (validation none) / pgcopydb:      ${ratio(copydb, results.none)} × pgcopydb throughput\n`);
    process.stdout.write(
      `ferry copy phase alone (none):           ${seconds(copyPhase.none)}, ${(raw.median / copyPhase.none).toFixed(2)} × raw throughput ` +
        '(MigrationStarted → TableCopied in the result\'s events: the chunk copies without CLI, preflight, DDL, ANALYZE)\n',
    );
    process.stdout.write(`ferry worker peak RSS (VmHWM), by part:  ${Object.entries(rss).map(([part, mb]) => `${part} ${mb} MB`).join(', ')}\n`);
    if (copydb) process.stdout.write(`ferry (validation none) vs pgcopydb:     ${lessOrMore(results.none.median, copydb.median)}\n`);
    // Less than any run can take here: the rows loaded and keyed at PostgreSQL's own speed (in
    // one pipe or two, whichever was faster here) and ANALYZE, one after the other as a run does
    // them — PostgreSQL's floor, which no tool copying through COPY goes below; then the same
    // with the CLI starting, which every Ferry run also does first.
    const pgFloor = Math.min(rawIndexFree.median, rawTwoPipes.median) + analyze.median;
    const floors = [
      { label: "floor, PostgreSQL's (a')|(a2) + (a''):", ms: pgFloor },
      { label: 'floor, with the CLI starting (f):', ms: pgFloor + cli!.median },
    ];
    for (const f of floors) {
      process.stdout.write(
        `${f.label.padEnd(41)}${seconds(f.ms)}, ${(f.ms / rawIndexFree.median).toFixed(2)} × (a')` +
          (copydb ? `, ${lessOrMore(f.ms, copydb.median)} than pgcopydb` : '') +
          `; ferry (none) ${seconds(results.none.median - f.ms)} over it\n`,
      );
    }
    for (const m of many) {
      const history = (h?: { events: number; bytes: number }) => (h ? ` [history ${h.events} events, ${(h.bytes / 1e6).toFixed(1)} MB]` : '');
      process.stdout.write(
        `${`${m.tables} tables × ${m.rows.toLocaleString('en-US')} rows`.padEnd(24)} ferry ${seconds(m.ferry.median)}${history(m.histories.ferry)}, ` +
          `with ${MANY_PARALLELISM} tables at once ${seconds(m.ferryWide.median)}${history(m.histories.ferryWide)}` +
          (m.ferryObjects
            ? `, and objects: all ${seconds(m.ferryObjects.median)} (${(m.ferryObjects.median / m.ferryWide.median).toFixed(2)}×)${history(m.histories.ferryObjects)}`
            : '') +
          (m.pgcopydb
            ? `, pgcopydb ${seconds(m.pgcopydb.median)} (ferry ${(m.pgcopydb.median / m.ferry.median).toFixed(2)}× / ${(m.pgcopydb.median / m.ferryWide.median).toFixed(2)}× its speed)`
            : '') +
          (m.pgcopydb && m.ferryObjects ? ` (objects: all ${(m.pgcopydb.median / m.ferryObjects.median).toFixed(2)}×)` : '') +
          (m.ferryObjectsFailed ? `, objects: all failed: ${m.ferryObjectsFailed}` : '') +
          (m.pgcopydbFailed ? `, pgcopydb failed: ${m.pgcopydbFailed}` : '') +
          (m.pgcopydbPeakMb ? ` [pgcopydb's peak memory ${m.pgcopydbPeakMb} MB]` : '') +
          (m.once ? ' (one run each)' : '') +
          '\n',
      );
      const kinds: Record<FerryKind, string> = { ferry: 'ferry', ferryWide: `${MANY_PARALLELISM} at once`, ferryObjects: 'objects: all' };
      for (const [kind, text] of Object.entries(m.timelines)) process.stdout.write(`      ${kinds[kind as FerryKind].padEnd(13)} ${text}\n`);
    }
    process.stdout.write(`(medians of ${REPEAT}; ferry times are end to end: CLI start, preflight, target DDL, copy, validation, ANALYZE, cleanup)\n`);
  } finally {
    if (!KEEP) for (const db of Object.values(dbs)) await sql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

interface ManyResult {
  tables: number;
  rows: number;
  once?: boolean;
  ferry: Sample;
  /** With parallelism.tables = MANY_PARALLELISM. */
  ferryWide: Sample;
  /** Likewise, with objects: all (each table's view and comment too, from pg_dump); for the shapes chosen (--objects-shapes). */
  ferryObjects?: Sample;
  /** How that run was refused or failed, when it was. */
  ferryObjectsFailed?: string;
  pgcopydb?: Sample;
  /** How pgcopydb failed, when it did (its first error lines), or why the bench stopped it. */
  pgcopydbFailed?: string;
  /** pgcopydb's peak memory (its processes' PSS summed), MB. */
  pgcopydbPeakMb?: number;
  /** The migration workflow's history after the last run of each. */
  histories: Partial<Record<FerryKind, { events: number; bytes: number }>>;
  /** Where the last run of each kind spent its time (the result's timeline, and outside the workflow). */
  timelines: Partial<Record<FerryKind, string>>;
}

type FerryKind = 'ferry' | 'ferryWide' | 'ferryObjects';

/** A `ferry start --wait` that did not succeed: its refusal or failure, in a line or two. */
class FerryRunFailed extends Error {
  readonly reason: string;
  constructor(schema: string, out: string) {
    super(`ferry (${schema}) failed: ${out.slice(-2000)}`);
    const lines = out.split('\n').map((l) => l.trim()).filter(Boolean);
    this.reason = (lines.filter((l) => /refus|fail|error/i.test(l)).slice(-2).join(' / ') || lines.slice(-2).join(' / ')).slice(0, 600);
  }
}

/**
 * The most tables preflight lets `objects: all` dump from `db`'s server: pg_dump locks each in
 * one transaction, and preflight keeps it to DUMP_LOCK_SHARE of the lock table.
 */
async function dumpRoom(db: string): Promise<number> {
  const [r] = await sql(
    url(db),
    `SELECT current_setting('max_locks_per_transaction')::int * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int) AS room`,
  );
  return Math.floor(Number(r.room) * DUMP_LOCK_SHARE);
}

/** A migration workflow's history: its events and their bytes, as the server counts them. */
async function historyOf(env: NodeJS.ProcessEnv, id: string): Promise<{ events: number; bytes: number }> {
  const connection = await Connection.connect({ address: env.TEMPORAL_ADDRESS });
  try {
    const { raw } = await new Client({ connection }).workflow.getHandle(id).describe();
    const info = raw.workflowExecutionInfo;
    return { events: Number(info?.historyLength ?? 0), bytes: Number(info?.historySizeBytes ?? 0) };
  } finally {
    await connection.close();
  }
}

/**
 * Orchestration overhead: many small tables, each shape in a schema of its own on `source`,
 * moved by ferry (validation none) and by pgcopydb into a fresh `target`.
 */
async function manyTables(
  source: string,
  target: string,
  env: NodeJS.ProcessEnv,
  pgcopydb: string | undefined,
  /** Takes the worker's peak RSS over what ran since the last reading (unlabelled: only resets it). */
  peak: (label?: string) => void,
): Promise<ManyResult[]> {
  const out: ManyResult[] = [];
  /** Ferry runs so far: each has an id of its own, to read its history by. */
  let runs = 0;
  const room = await dumpRoom(source);
  for (const shape of MANY_SHAPES) {
    const schema = `m${shape.tables}`;
    await sql(url(source), `CREATE SCHEMA ${schema}`);
    // 250 tables a transaction: thousands in one would outgrow the server's lock table.
    for (let first = 1; first <= shape.tables; first += 250) {
      await sql(
        url(source),
        `DO $$ BEGIN FOR i IN ${first}..${Math.min(shape.tables, first + 249)} LOOP
         EXECUTE format('CREATE TABLE ${schema}.t%s (id bigint PRIMARY KEY, account int NOT NULL, label text, h1 text)', i);
         EXECUTE format('INSERT INTO ${schema}.t%s SELECT g, g %% 1000, ''label '' || g, md5(g::text) FROM generate_series(1, ${shape.rows}) g', i);
         -- Objects for objects: all (and pgcopydb): a view over each table, and a comment on it.
         EXECUTE format('CREATE VIEW ${schema}.v%s AS SELECT account, count(*) AS n FROM ${schema}.t%s GROUP BY account', i, i);
         EXECUTE format('COMMENT ON TABLE ${schema}.t%s IS ''table %s''', i, i);
       END LOOP; END $$;`,
      );
    }
    await sql(url(source), 'VACUUM ANALYZE');
    const rounds = shape.once ? 1 : REPEAT;
    /** The parent's history and the result's timeline of the last run of each kind. */
    const histories: ManyResult['histories'] = {};
    const timelines: ManyResult['timelines'] = {};
    const ferryRun = (kind: FerryKind, parallelism?: number, objects?: 'all') => {
      const specFile = join(tmpdir(), `ferry-bench-${schema}-${Date.now()}.json`);
      const id = () => `bench-${schema}-${kind}-${(runs += 1)}`;
      let last = '';
      let lastMs = 0;
      return repeated(
        () => recreate(target),
        async () => {
          last = id();
          // All of the schema's tables, by pattern: the plan of thousands is stored on the target.
          writeFileSync(
            specFile,
            JSON.stringify({
              id: last,
              source: 'bench_many',
              target: 'bench_many_t',
              validation: 'none',
              tables: [`${schema}.t*`],
              ...(parallelism ? { parallelism: { tables: parallelism } } : {}),
              ...(objects ? { objects } : {}),
            }),
          );
          const started = Date.now();
          // Followed as a user would (progress read once a second), not --json, which only awaits the result.
          const r = await run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'start', specFile, '--wait'], env);
          if (r.code !== 0) throw new FerryRunFailed(schema, r.out);
          lastMs = Date.now() - started;
        },
        async () => {
          const [n] = await sql(url(target), `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = '${schema}'`);
          if (n.n !== shape.tables) throw new Error(`ferry (${schema}) created ${n.n} tables, expected ${shape.tables}`);
          const [v] = await sql(url(target), `SELECT count(*)::int AS n FROM pg_views WHERE schemaname = '${schema}'`);
          if (v.n !== (objects ? shape.tables : 0)) throw new Error(`ferry (${schema}) created ${v.n} views, expected ${objects ? shape.tables : 0}`);
          histories[kind] = await historyOf(env, last);
          // The result, which the server keeps: a status read asks the worker to replay the history (thousands of events).
          const result = await run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'result', last, '--json'], env);
          timelines[kind] = result.code === 0 ? timelineText(result.stdout, lastMs) : `no result: ${result.out.slice(-300)}`;
        },
        rounds,
      );
    };
    const label = `${shape.tables} tables × ${shape.rows.toLocaleString('en-US')} rows`;
    peak();
    const ferry = await ferryRun('ferry');
    const ferryWide = await ferryRun('ferryWide', MANY_PARALLELISM);
    peak(label);
    let ferryObjects: Sample | undefined;
    let ferryObjectsFailed: string | undefined;
    if (OBJECTS_SHAPES ? OBJECTS_SHAPES.includes(shape.tables) : shape.tables <= room) {
      // A refusal or failure here is a result (what objects: all does at this size), not the bench's end.
      ferryObjects = await ferryRun('ferryObjects', MANY_PARALLELISM, 'all').catch((err: unknown) => {
        if (!(err instanceof FerryRunFailed)) throw err;
        ferryObjectsFailed = err.reason;
        return undefined;
      });
      peak(`${label}, objects: all`);
    }
    let copydb: Sample | undefined;
    let copydbFailed: string | undefined;
    let copydbPeakMb = 0;
    if (pgcopydb) {
      const work = join(tmpdir(), `ferry-bench-pgcopydb-${schema}-${Date.now()}`);
      const filter = join(tmpdir(), `ferry-bench-pgcopydb-${schema}.ini`);
      writeFileSync(filter, `[include-only-schema]\n${schema}\n`);
      // A failed clone is a result here, not the bench's end: at 10,000 tables pgcopydb restores
      // the schema in one transaction, which a server's lock table may not hold.
      copydb = await repeated(
        () => recreate(target),
        async () => {
          const r = await runPgcopydb(pgcopydb, ['clone', '--source', url(source), '--target', url(target), '--table-jobs', '2', '--index-jobs', '2', '--dir', work, '--no-owner', '--no-acl', '--skip-extensions', '--restart', '--filters', filter]);
          copydbPeakMb = Math.max(copydbPeakMb, r.peakMb);
          if (r.stopped) {
            const [copied] = await sql(url(target), `SELECT count(*)::int AS n FROM pg_stat_user_tables WHERE schemaname = '${schema}' AND n_tup_ins > 0`);
            copydbFailed = `${r.stopped}, ${copied.n} of ${shape.tables} tables with rows on the target`;
          } else if (r.code !== 0) copydbFailed = (r.out.match(/ERROR {2}pg_restore: error: .*|ERROR .*/g) ?? [r.out.slice(-300)]).slice(0, 2).join(' / ');
        },
        async () => undefined,
        rounds,
      ).then((s) => (copydbFailed ? undefined : s));
    }
    out.push({ ...shape, ferry, ferryWide, ferryObjects, ferryObjectsFailed, pgcopydb: copydb, pgcopydbFailed: copydbFailed, pgcopydbPeakMb: copydbPeakMb, histories, timelines });
    // Dropped 250 tables a transaction too: 2,000 tables and their views at once outgrow the lock table.
    for (let first = 1; first <= shape.tables; first += 250) {
      await sql(url(source), `DO $$ BEGIN FOR i IN ${first}..${Math.min(shape.tables, first + 249)} LOOP EXECUTE format('DROP TABLE ${schema}.t%s CASCADE', i); END LOOP; END $$`);
    }
    await sql(url(source), `DROP SCHEMA ${schema} CASCADE`);
  }
  return out;
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
