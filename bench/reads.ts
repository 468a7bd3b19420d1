/**
 * `npm run bench:reads` — what reading a table by key ranges costs the copy, against one read of
 * the whole table, through Ferry's own stream (src/db/copy-stream.ts: COPY … TO STDOUT piped by
 * the worker into COPY … FROM STDIN), each into a fresh key-less table:
 *   (w) one COPY of the whole key range, read as the planner chooses (a sequential scan);
 *   (i) the same range read through the key's index (enable_seqscan off for the statement);
 *   (b) the table in --batches key ranges of equal size (8 and 32 by default), each its own
 *       target transaction as a copy batch is (index range scans, as Ferry's batches are read);
 *   (p) psql | psql, the binary COPY pipe bench:copy's (a') times, for reference;
 *   (t) the fixed cost of one batch: 200 batches of 10 rows, per batch;
 *   (s) the target alone: the table written to files by the server, in 1, 2, 4, 8 and 16 key
 *       ranges, then loaded server-side (`COPY … FROM '<file>'`) one statement a file, each its
 *       own transaction — what the number of COPY statements costs the load, without the source
 *       or the worker (a server on this machine only: it writes and reads the files).
 * Rounds alternate the order of the variants; the median of --repeat rounds is printed with the
 * worker side's CPU (this process's) and the ratios to (w). Figures, never assertions.
 *
 * Options: --rows N (2000000), --repeat N (3), --batches "8,32", --pg URL (admin URL), --keep.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { inTransaction } from '../src/db/connections';
import { copyStream } from '../src/db/copy-stream';
import type { CopyTable } from '../src/core/plan';
import { databaseUrl, DEFAULT_TEST_PG, ensurePostgres, runSql } from '../src/dev/postgres';
import { findOnPath } from '../src/dev/temporal-binary';
import { median } from './figures';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const ROWS = Number(arg('--rows', '2000000'));
const REPEAT = Number(arg('--repeat', '3'));
const BATCHES = arg('--batches', '8,32').split(',').map(Number);
const ADMIN = arg('--pg', process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);
const KEEP = args.includes('--keep');
const PSQL = findOnPath('psql') ?? '/usr/bin/psql';

const SOURCE_DB = 'ferry_bench_reads_src';
const TARGET_DB = 'ferry_bench_reads_dst';
const url = (db: string) => databaseUrl(ADMIN, db);
const COLUMNS = ['id', 'account', 'label', 'amount', 'h1', 'h2', 'created_at'];
const TABLE: CopyTable = {
  source: { schema: 'public', name: 'rows' },
  target: { schema: 'public', name: 'rows' },
  columns: COLUMNS,
  copyFormat: 'binary',
} as CopyTable;
const SELECT = `SELECT ${COLUMNS.join(', ')} FROM public.rows`;

interface Run {
  ms: number;
  cpuMs: number;
}

async function connect(db: string): Promise<Client> {
  const client = new Client(url(db));
  await client.connect();
  return client;
}

async function freshTarget(): Promise<void> {
  await runSql(url(TARGET_DB), `DROP TABLE IF EXISTS public.rows;
    CREATE TABLE public.rows (id bigint, account int NOT NULL, label text, amount numeric(12,2), h1 text, h2 text, created_at timestamptz)`);
  await runSql(ADMIN, 'CHECKPOINT');
}

/** Copies `ranges` (each `WHERE` text, or '' for none) in one target transaction each. */
async function copyRanges(ranges: string[], sourceSetting?: string): Promise<Run> {
  await freshTarget();
  const [source, target] = await Promise.all([connect(SOURCE_DB), connect(TARGET_DB)]);
  try {
    if (sourceSetting) await source.query(sourceSetting);
    const cpu = process.cpuUsage();
    const started = performance.now();
    for (const where of ranges) {
      await inTransaction(target, async () => {
        await target.query('SET LOCAL synchronous_commit = off');
        await copyStream(source, target, TABLE, `${SELECT}${where ? ` WHERE ${where}` : ''}`);
      });
    }
    const used = process.cpuUsage(cpu);
    return { ms: performance.now() - started, cpuMs: (used.user + used.system) / 1000 };
  } finally {
    await Promise.all([source.end(), target.end()]);
  }
}

function equalRanges(count: number, rows = ROWS): string[] {
  const per = Math.ceil(rows / count);
  return Array.from({ length: count }, (_, i) => `id > ${i * per} AND id <= ${(i + 1) * per}`);
}

async function psqlPipe(): Promise<Run> {
  await freshTarget();
  const started = performance.now();
  const pipe = `${PSQL} -X -q "${url(SOURCE_DB)}" -c "COPY public.rows TO STDOUT (FORMAT binary)" | ${PSQL} -X -q "${url(TARGET_DB)}" -c "COPY public.rows FROM STDIN (FORMAT binary)"`;
  const r = spawnSync('bash', ['-o', 'pipefail', '-c', pipe]);
  if (r.status !== 0) throw new Error(`psql pipe failed: ${r.stderr}`);
  return { ms: performance.now() - started, cpuMs: NaN };
}

/** The table in `parts` key ranges, written to files by the server (same machine), each loaded by its own COPY. */
async function serverSideLoads(parts: number[]): Promise<Map<number, number[]>> {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-bench-reads-'));
  chmodSync(dir, 0o777); // the server's own user writes and reads the files
  try {
    for (const n of parts) {
      for (const [i, where] of equalRanges(n).entries()) {
        await runSql(url(SOURCE_DB), `COPY (${SELECT} WHERE ${where}) TO '${join(dir, `${n}-${i}`)}' (FORMAT binary)`);
      }
    }
    const times = new Map<number, number[]>(parts.map((n) => [n, []]));
    for (let round = 0; round < REPEAT; round += 1) {
      for (const n of round % 2 === 0 ? parts : [...parts].reverse()) {
        await freshTarget();
        const target = await connect(TARGET_DB);
        try {
          const started = performance.now();
          for (let i = 0; i < n; i += 1) {
            await inTransaction(target, async () => {
              await target.query('SET LOCAL synchronous_commit = off');
              await target.query(`COPY public.rows FROM '${join(dir, `${n}-${i}`)}' (FORMAT binary)`);
            });
          }
          times.get(n)!.push(performance.now() - started);
        } finally {
          await target.end();
        }
      }
    }
    return times;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  await ensurePostgres(ADMIN);
  for (const db of [SOURCE_DB, TARGET_DB]) {
    await runSql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await runSql(ADMIN, `CREATE DATABASE ${db}`);
  }
  try {
    process.stdout.write(`seeding ${ROWS.toLocaleString('en-US')} rows… `);
    await runSql(url(SOURCE_DB), `CREATE TABLE public.rows (id bigint PRIMARY KEY, account int NOT NULL, label text, amount numeric(12,2), h1 text, h2 text, created_at timestamptz);
      INSERT INTO public.rows SELECT g, g % 100000, 'label ' || g, (g % 1000000) / 100.0, md5(g::text), md5((g * 7)::text),
             '2020-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, ${ROWS}) g`);
    await runSql(url(SOURCE_DB), 'VACUUM ANALYZE public.rows');
    process.stdout.write('done\n\n');

    const variants: { label: string; run: () => Promise<Run> }[] = [
      { label: '(w) whole key range, one COPY (sequential scan)', run: () => copyRanges(['']) },
      { label: '(i) whole key range, one COPY through the index', run: () => copyRanges([`id > 0 AND id <= ${ROWS}`], 'SET enable_seqscan = off') },
      ...BATCHES.map((n) => ({ label: `(b) ${n} key-range batches`, run: () => copyRanges(equalRanges(n)) })),
      { label: '(p) psql | psql binary COPY pipe', run: psqlPipe },
    ];
    const runs = new Map<string, Run[]>(variants.map((v) => [v.label, []]));
    for (let round = 0; round < REPEAT; round += 1) {
      // Alternate the order: a drifting machine then tilts no variant more than another.
      const order = round % 2 === 0 ? variants : [...variants].reverse();
      for (const v of order) runs.get(v.label)!.push(await v.run());
    }
    const base = median(runs.get(variants[0].label)!.map((r) => r.ms));
    for (const v of variants) {
      const ms = median(runs.get(v.label)!.map((r) => r.ms));
      const cpu = median(runs.get(v.label)!.map((r) => r.cpuMs));
      const cpuText = Number.isNaN(cpu) ? '' : `worker CPU ${(cpu / 1000).toFixed(2)} s`;
      process.stdout.write(`${v.label.padEnd(52)} ${(ms / 1000).toFixed(2).padStart(6)} s  ${(ms / base).toFixed(2)}× (w)  ${cpuText}\n`);
    }
    const tiny = await copyRanges(equalRanges(200, 2000));
    process.stdout.write(`${'(t) one batch of 10 rows, fixed cost'.padEnd(52)} ${(tiny.ms / 200).toFixed(2).padStart(6)} ms a batch\n`);
    const loads = await serverSideLoads([1, 2, 4, 8, 16]);
    const one = median(loads.get(1)!);
    for (const [n, times] of loads) {
      const ms = median(times);
      process.stdout.write(`${`(s) loaded server-side in ${n} COPY statement${n > 1 ? 's' : ''}`.padEnd(52)} ${(ms / 1000).toFixed(2).padStart(6)} s  ${(ms / one).toFixed(2)}× one\n`);
    }
    process.stdout.write(`(medians of ${REPEAT} rounds; Ferry sizes a batch by bytes, about 64 MB: 4–5 batches of this table at 2,000,000 rows)\n`);
  } finally {
    if (!KEEP) for (const db of [SOURCE_DB, TARGET_DB]) await runSql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
