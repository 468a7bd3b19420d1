/**
 * Application load for cutover tests: pgbench (its TPC-B-like script plus a script of inserts,
 * deletes and key-changing updates) and a batch job whose write transactions stay open for a
 * long time, back to back. Both run until the source is frozen or they are stopped.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { Client } from 'pg';
import { findOnPath } from '../../src/dev/temporal-binary';
import type { TestDatabases } from './databases';

export const PGBENCH = findOnPath('pgbench') ?? '/usr/lib/postgresql/15/bin/pgbench';

/** pgbench's tables with primary keys (scale 1: 100,000 accounts); pgbench_history has none and is not migrated. */
export async function initPgbench(url: string, scale = 1): Promise<void> {
  const { code, out } = await runPgbench(['-i', '-q', '-I', 'dtgvp', '-s', String(scale), url]);
  if (code !== 0) throw new Error(`pgbench -i failed:\n${out}`);
}

/** A suite's `seed`: pgbench's tables at `scale` in database `role`, then `sql` (objects around them). */
export function pgbenchSeed(role: string, scale: number, sql = ''): (dbs: TestDatabases) => Promise<void> {
  return async (dbs) => {
    await initPgbench(dbs.url(role), scale);
    if (sql) await dbs.exec(role, sql);
  };
}

/** Inserts, deletes and key-changing updates on pgbench_accounts (no statement can fail on a key). */
const CHURN_SCRIPT = `
\\set aid random(1, 100000 * :scale)
\\set newaid random(100000000, 900000000)
BEGIN;
INSERT INTO pgbench_accounts (aid, bid, abalance, filler) VALUES (:newaid, 1, 0, 'churn') ON CONFLICT DO NOTHING;
DELETE FROM pgbench_accounts WHERE aid = :newaid - 1;
UPDATE pgbench_accounts SET aid = aid + 1000000000 WHERE aid = :aid;
END;
`;

export interface Load {
  /** Resolves when pgbench exits (it aborts its clients once their writes are refused). */
  done: Promise<{ code: number | null; out: string }>;
  stop(): Promise<void>;
}

function runPgbench(argv: string[]): Promise<{ code: number | null; out: string }> {
  return startPgbench(argv).done;
}

function startPgbench(argv: string[]): Load {
  const child = spawn(PGBENCH, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out = (out + d).slice(-20_000)));
  child.stderr.on('data', (d) => (out = (out + d).slice(-20_000)));
  // Once its output is read to the end ('close'), not as soon as it exits: the summary comes last.
  const done = new Promise<{ code: number | null; out: string }>((resolve) => child.on('close', (code) => resolve({ code, out })));
  return {
    done,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      await done;
    },
  };
}

/**
 * pgbench with `clients` clients of TPC-B and churn, for up to `seconds`; `ratePerSecond`, when
 * given, caps its transactions per second (pgbench -R) so that a test of correctness under
 * writes does not turn into a test of apply capacity against whatever else shares the machine.
 */
export function startPgbenchLoad(url: string, clients = 2, seconds = 600, ratePerSecond?: number): Load {
  const script = join(tmpdir(), `ferry-churn-${process.pid}.sql`);
  writeFileSync(script, CHURN_SCRIPT);
  const rate = ratePerSecond ? ['-R', String(ratePerSecond)] : [];
  return startPgbench(['-n', '-c', String(clients), '-j', '1', '-T', String(seconds), ...rate, '-b', 'tpcb-like@3', '-f', `${script}@1`, url]);
}

/**
 * pgbench's TPC-B through a pooler for `seconds`, each transaction logged (-l) under `logPrefix`:
 * what an application sees of a switch. pgbench ends a client at its first error (and reports
 * failed transactions), so a run that ends with exit code 0 failed none.
 */
export function startLoggedTpcb(url: string, clients: number, seconds: number, logPrefix: string): Load {
  return startPgbench(['-n', '-c', String(clients), '-j', '1', '-T', String(seconds), '-b', 'tpcb-like', '-l', `--log-prefix=${logPrefix}`, url]);
}

/** Each logged transaction's latency in ms (pgbench -l: client, number, latency µs, script, epoch s, µs). */
export function loggedLatenciesMs(logPrefix: string): number[] {
  const dir = dirname(logPrefix);
  const files = readdirSync(dir).filter((f) => f.startsWith(`${basename(logPrefix)}.`));
  const latencies: number[] = [];
  for (const file of files) {
    for (const line of readFileSync(join(dir, file), 'utf8').split('\n')) {
      const fields = line.trim().split(/\s+/);
      if (fields.length >= 6) latencies.push(Number(fields[2]) / 1000);
    }
  }
  return latencies;
}

export interface BatchJob {
  /** Transactions committed, and when each write transaction began and ended. */
  committed: number;
  longestMs: number;
  /** The first error that was not a refusal by the freeze, if any. */
  otherError?: string;
  frozen?: string;
  stop(): Promise<void>;
}

/**
 * A batch job: insert a row, "work" for `holdMs` with the transaction open, update the row,
 * commit — back to back, so at any moment one write transaction on `table` is open.
 */
export async function startBatchJob(url: string, table: string, holdMs: number): Promise<BatchJob> {
  const client = new Client({ connectionString: url, application_name: 'batch-job' });
  await client.connect();
  client.on('error', () => undefined);
  let running = true;
  const job: BatchJob = {
    committed: 0,
    longestMs: 0,
    async stop() {
      running = false;
      await loop;
    },
  };
  const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const loop = (async () => {
    while (running) {
      const began = Date.now();
      try {
        await client.query('BEGIN');
        const { rows } = await client.query(`INSERT INTO ${table} (note) VALUES ('batch') RETURNING id`);
        for (let waited = 0; waited < holdMs && running; waited += 100) await wait(100);
        await client.query(`UPDATE ${table} SET note = 'batch done' WHERE id = $1`, [rows[0].id]);
        await client.query('COMMIT');
        job.committed += 1;
        job.longestMs = Math.max(job.longestMs, Date.now() - began);
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        const message = (err as Error).message;
        if (/frozen/.test(message)) job.frozen = message;
        else job.otherError ??= message;
        break;
      }
    }
    await client.end().catch(() => undefined);
  })();
  return job;
}
