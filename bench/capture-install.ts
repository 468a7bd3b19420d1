/**
 * `npm run bench:capture-install` — what installing capture costs the application's writes at
 * many tables: the install as one transaction (each table's CREATE TRIGGER lock held until the
 * end, as Ferry did before) against the install in parts (each table committed on its own, as
 * installCapture does now), side by side in one run.
 *
 * For each count of tables (--tables, 100,500), --rounds rounds of each way in turns, each on a
 * fresh database of that many one-row tables: a writer per sampled table (the first, the middle
 * and the last) updates its row in a loop from before the install until after it, and the bench
 * prints the install's time and the longest any single write waited on each sampled table
 * (medians of the rounds). Figures, never assertions. The src/db functions are called directly
 * (no Temporal server), the way the activity calls the one in parts.
 *
 * Options: --tables 100,500 --rounds N (2) --pg URL (an admin URL; the shared server by default).
 */
import { Client, Pool } from 'pg';
import { CaptureInput } from '../src/core/capture-input';
import { installCaptureIn, installCaptureInParts, LOCK_TIMEOUT } from '../src/db/capture-install';
import { inTransaction } from '../src/db/connections';
import { databaseUrl, DEFAULT_TEST_PG, runSql } from '../src/dev/postgres';
import { median } from './figures';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const COUNTS = arg('--tables', '100,500').split(',').map(Number);
const ROUNDS = Number(arg('--rounds', '2'));
const ADMIN = arg('--pg', process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);
const TAG = Date.now().toString(36);

type Way = 'one transaction' | 'in parts';
const WAYS: Way[] = ['one transaction', 'in parts'];

interface Round {
  installMs: number;
  /** The longest single write on each sampled table: first, middle, last. */
  worstWriteMs: number[];
}

/** A fresh database of `count` one-row tables. */
async function createSource(db: string, count: number): Promise<string> {
  await runSql(ADMIN, `CREATE DATABASE ${db}`);
  const url = databaseUrl(ADMIN, db);
  for (let from = 0; from < count; from += 200) {
    const upto = Math.min(count, from + 200);
    const sql = Array.from({ length: upto - from }, (_, i) => `CREATE TABLE public.t${from + i} (id bigint PRIMARY KEY, v text); INSERT INTO public.t${from + i} VALUES (1, 'a');`);
    await runSql(url, sql.join('\n'));
  }
  return url;
}

/** Writers on `tables` until stopped: the longest single UPDATE each met. */
function startWriters(url: string, tables: number[]) {
  let stop = false;
  const worst = tables.map(() => 0);
  const firsts: Promise<void>[] = [];
  const loops = tables.map(async (t, i) => {
    const client = new Client({ connectionString: url });
    await client.connect();
    let wrote: () => void = () => undefined;
    firsts.push(new Promise<void>((r) => (wrote = r)));
    try {
      while (!stop) {
        const started = Date.now();
        await client.query(`UPDATE public.t${t} SET v = md5(random()::text) WHERE id = 1`);
        worst[i] = Math.max(worst[i], Date.now() - started);
        wrote();
        await new Promise((r) => setTimeout(r, 5));
      }
    } finally {
      await client.end();
    }
  });
  return {
    /** Every writer has written once. */
    started: async () => {
      while (firsts.length < tables.length) await new Promise((r) => setImmediate(r));
      await Promise.all(firsts);
    },
    async stop(): Promise<number[]> {
      stop = true;
      await Promise.all(loops);
      return worst;
    },
  };
}

async function round(count: number, way: Way, n: number): Promise<Round> {
  const db = `ferry_bench_ci_${TAG}_${count}_${way === 'in parts' ? 'p' : 'o'}_${n}`;
  const url = await createSource(db, count);
  const pool = new Pool({ connectionString: url, max: 1 });
  try {
    const input: CaptureInput = {
      migrationId: `bench-${n}`,
      source: 'bench',
      armFreeze: true,
      tables: Array.from({ length: count }, (_, i) => ({ index: i, source: { schema: 'public', name: `t${i}` }, keyColumns: [{ name: 'id', type: 'bigint', collatable: false }] })),
    };
    const writers = startWriters(url, [0, Math.floor(count / 2), count - 1]);
    await writers.started();
    const db0 = await pool.connect();
    const started = Date.now();
    try {
      const part = <T>(work: () => Promise<T>) =>
        inTransaction(db0, async () => {
          await db0.query(LOCK_TIMEOUT);
          return work();
        });
      if (way === 'in parts') await installCaptureInParts(db0, input, part);
      else await part(() => installCaptureIn(db0, input));
    } finally {
      db0.release();
    }
    const installMs = Date.now() - started;
    return { installMs, worstWriteMs: await writers.stop() };
  } finally {
    await pool.end();
    await runSql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  }
}

async function main(): Promise<void> {
  console.log(`bench:capture-install — ${ROUNDS} round(s) of each way per count, in turns; medians`);
  console.log('| tables | install | time | longest write: first table | middle | last | time, parts ÷ one |');
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  for (const count of COUNTS) {
    const runs: Record<Way, Round[]> = { 'one transaction': [], 'in parts': [] };
    for (let n = 0; n < ROUNDS; n += 1) for (const way of WAYS) runs[way].push(await round(count, way, n));
    const time: Record<Way, number> = { 'one transaction': 0, 'in parts': 0 };
    for (const way of WAYS) {
      time[way] = median(runs[way].map((r) => r.installMs));
      const worst = [0, 1, 2].map((i) => median(runs[way].map((r) => r.worstWriteMs[i])));
      const ratio = way === 'in parts' ? `${(time['in parts'] / time['one transaction']).toFixed(2)}×` : '';
      console.log(`| ${count} | ${way} | ${(time[way] / 1000).toFixed(2)} s | ${worst[0]} ms | ${worst[1]} ms | ${worst[2]} ms | ${ratio} |`);
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
