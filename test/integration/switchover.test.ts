/**
 * The switch (cutover.switch): the application's connections moved by the cutover.
 *
 * - pgbouncer: pgbench's TPC-B through a real PgBouncer (transaction pooling) during an online
 *   migration; the switch worker beside it (`ferry worker --task-queue`, a process) SIGKILLed
 *   once the pooler is paused and started again. pgbench fails no transaction, its longest one is
 *   about the application's pause, every transaction before the pause is on the source and every
 *   one after it on the target (their balances add up on the target), and PgBouncer points at
 *   the target, resumed.
 * - A repoint that fails (the file holds no entry for the database) rolls back with PgBouncer
 *   resumed on the source: pgbench goes on there and fails nothing.
 * - webhook: a switcher that answers 500 at `switched` rolls the migration back; the source
 *   takes writes again and the switcher hears `reverted`, each request signed.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Client } from 'pg';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startPgBouncer, PgBouncer } from '../../src/dev/pgbouncer';
import { rowsAsText } from '../helpers/databases';
import { loggedLatenciesMs, pgbenchSeed, startLoggedTpcb } from '../helpers/pgbench';
import { Receiver, signatureVerifies } from '../helpers/receiver';
import { expectCleanRun } from '../helpers/repairs';
import { eventually, resultWithin, RunningProcessWorker, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import type { ResultDocument } from '../../src/core/status';

const TABLES: [string, string][] = [
  ['public.pgbench_accounts', 'aid'],
  ['public.pgbench_branches', 'bid'],
  ['public.pgbench_tellers', 'tid'],
];
const HISTORY = `CREATE TABLE public.pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));`;
const SWITCH_QUEUE = 'ferry-switch-test';
const SECRET = 'switch-secret';

describe('cutover.switch', () => {
  const suite = stackSuite({
    name: 'switchover',
    // The target has pgbench's history table (not migrated: it has no key), for the writes after the switch.
    databases: { source: '', target: HISTORY },
    connections: { app: 'source', next: 'target' },
    seed: pgbenchSeed('source', 1),
    perTest: 'databases',
    extraEnv: { FERRY_SECRET_SWITCH: SECRET, FERRY_CALLBACK_ALLOW_PRIVATE: 'true' },
  });
  let pooler: PgBouncer | undefined;
  let dir: string;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ferry-switchover-'));
    pooler = await startPgBouncer({ app: { host: '127.0.0.1', port: Number(new URL(suite.dbs.url('source')).port || 5432), dbname: dbName(suite.dbs.url('source')) } });
  });

  afterEach(async () => {
    // The switch workers of this test: the next test's pooler is another.
    for (const worker of suite.stack.processes) if (worker.process.exitCode === null) worker.process.kill('SIGKILL');
    await Promise.all(suite.stack.processes.map((w) => w.exited));
    await pooler?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  function dbName(url: string): string {
    return decodeURIComponent(new URL(url).pathname.slice(1));
  }

  function onlineSpec(id: string, switchTo: Record<string, unknown>) {
    return {
      id,
      source: 'app',
      target: 'next',
      mode: 'online',
      tables: TABLES.map(([t]) => t),
      cutover: { approval: 'manual', approvalTimeout: '10m', switch: switchTo },
    };
  }

  /** `work`'s result; on its failure pgbench is stopped first. */
  async function untilDone(stop: () => Promise<void>, work: () => Promise<ResultDocument>): Promise<ResultDocument> {
    try {
      return await work();
    } catch (err) {
      await stop();
      throw err;
    }
  }

  /** A switch worker beside the pooler, then a migration with the PgBouncer switch, waiting for its approval. */
  async function pooledMigration(migrationId: string, workerName: string, configFile = pooler!.databasesFile, cutover: Record<string, unknown> = {}): Promise<RunningProcessWorker> {
    const worker = await suite.stack.startWorkerProcessReady(workerName, ['--task-queue', SWITCH_QUEUE], { FERRY_CONN_POOLADMIN: pooler!.adminUrl });
    const spec = onlineSpec(migrationId, { pgbouncer: { admin: 'pooladmin', database: 'app', configFile, taskQueue: SWITCH_QUEUE } });
    await suite.stack.ferry.start({ ...spec, cutover: { ...spec.cutover, ...cutover } });
    await waitForPhase(suite.stack.ferry, migrationId, 'AWAITING_APPROVAL', 120_000);
    return worker;
  }

  const historyRows = async (role: string) => (await suite.dbs.query<{ n: number }>(role, 'SELECT count(*)::int AS n FROM pgbench_history'))[0].n;

  async function poolerEntry(): Promise<Record<string, unknown>> {
    return (await pooler!.admin('SHOW DATABASES')).find((r) => r.name === 'app')!;
  }

  it('pgbouncer: pgbench through PgBouncer fails no transaction across the cutover, and its writes after the resume are on the target', async () => {
    const env = { FERRY_CONN_POOLADMIN: pooler!.adminUrl };
    const id = 'switch-pgbouncer';
    let switchWorker = await pooledMigration(id, 'switch-1');
    const log = join(dir, 'tx');
    const load = startLoggedTpcb(pooler!.url('app'), 2, 40, log);
    const result = await untilDone(load.stop, async () => {
      await eventually(async () => (await historyRows('source')) > 300, 60_000);
      await suite.stack.ferry.approve(id);
      // The pooler is paused: the worker beside it dies; another takes its place.
      await eventually(async () => (await suite.stack.ferry.status(id)).events.some((e) => e.type === 'SwitchPaused'), 60_000);
      switchWorker.process.kill('SIGKILL');
      await switchWorker.exited;
      switchWorker = await suite.stack.startWorkerProcessReady('switch-2', ['--task-queue', SWITCH_QUEUE], env);
      return resultWithin(suite.stack.ferry, id, 180_000);
    });
    const bench = await load.done;
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(suite.stack.ferry, result);
    // pgbench: no failed transaction, no client ended by an error.
    expect(bench.code).toBe(0);
    expect(bench.out).toMatch(/number of failed transactions: 0 \(0\.000%\)/);
    expect(bench.out).not.toMatch(/aborted/);
    // The application's pause is reported beside the database's outage, and pgbench's longest transaction is about it.
    const { clientPauseMs, writeOutageMs, switch: switcher } = result.cutover!;
    expect(switcher).toBe('pgbouncer');
    expect(clientPauseMs).toBeGreaterThanOrEqual(writeOutageMs);
    const longest = Math.max(...loggedLatenciesMs(log));
    process.stderr.write(`switchover: write outage ${writeOutageMs} ms, application paused ${clientPauseMs} ms, pgbench's longest transaction ${longest.toFixed(0)} ms\n`);
    expect(longest).toBeGreaterThan(clientPauseMs! * 0.5);
    expect(longest).toBeLessThan(clientPauseMs! + 2_000);
    expect(result.events.filter((e) => e.type.startsWith('Switch')).map((e) => [e.type, e.detail?.on])).toEqual([
      ['SwitchPaused', undefined],
      ['SwitchRepointed', undefined],
      ['SwitchResumed', 'target'],
    ]);
    // Every transaction before the pause on the source, every one after it on the target: none on both, none lost.
    const [source, target] = [await historyRows('source'), await historyRows('target')];
    expect(target).toBeGreaterThan(0);
    expect(source + target).toBe(Number(/number of transactions actually processed: (\d+)/.exec(bench.out)![1]));
    const [{ last }] = await suite.dbs.query<{ last: string }>('source', 'SELECT max(mtime)::text AS last FROM pgbench_history');
    const [{ first }] = await suite.dbs.query<{ first: string }>('target', 'SELECT min(mtime)::text AS first FROM pgbench_history');
    expect(last < first).toBe(true);
    // TPC-B adds each delta to a branch and records it in the history: the target's branches hold both sides' deltas.
    const deltas = async (role: string) => Number((await suite.dbs.query<{ s: string }>(role, 'SELECT coalesce(sum(delta), 0)::text AS s FROM pgbench_history'))[0].s);
    const [{ balance }] = await suite.dbs.query<{ balance: string }>('target', 'SELECT sum(bbalance)::text AS balance FROM pgbench_branches');
    expect(Number(balance)).toBe((await deltas('source')) + (await deltas('target')));
    // The source's tables as they were at the pause; PgBouncer points at the target, resumed, and the file kept beside it is gone.
    expect(await rowsAsText(suite.dbs, 'source', 'public.pgbench_tellers', 'tid')).not.toEqual(await rowsAsText(suite.dbs, 'target', 'public.pgbench_tellers', 'tid'));
    expect(await poolerEntry()).toMatchObject({ database: dbName(suite.dbs.url('target')), paused: 0 });
    expect(switchWorker.process.exitCode).toBeNull();
  }, 420_000);

  it('pgbouncer: a repoint that fails rolls back with PgBouncer resumed on the source, and pgbench goes on there failing nothing', async () => {
    // A copy of PgBouncer's file, with the entry at preflight and without it by the cutover
    // (somebody edited it meanwhile): the repoint is refused after the drain.
    const elsewhere = join(dir, 'other-databases.ini');
    writeFileSync(elsewhere, readFileSync(pooler!.databasesFile, 'utf8'));
    const id = 'switch-refused';
    await pooledMigration(id, 'switch-3', elsewhere);
    writeFileSync(elsewhere, '[databases]\n');
    const load = startLoggedTpcb(pooler!.url('app'), 2, 25, join(dir, 'tx'));
    const result = await untilDone(load.stop, async () => {
      await eventually(async () => (await historyRows('source')) > 300, 60_000);
      await suite.stack.ferry.approve(id);
      return resultWithin(suite.stack.ferry, id, 180_000);
    });
    const bench = await load.done;
    expect(result.state).toBe('FAILED');
    expect(result.error?.message).toMatch(/has no entry for database app/);
    expect(result.events.filter((e) => e.type.startsWith('Switch')).map((e) => [e.type, e.detail?.on])).toEqual([
      ['SwitchPaused', undefined],
      ['SwitchResumed', 'source'],
    ]);
    expect(bench.code).toBe(0);
    expect(bench.out).toMatch(/number of failed transactions: 0 \(0\.000%\)/);
    // Every transaction on the source, none on the target; PgBouncer still points at the source, resumed.
    expect(await historyRows('source')).toBe(Number(/number of transactions actually processed: (\d+)/.exec(bench.out)![1]));
    expect(await historyRows('target')).toBe(0);
    expect(await poolerEntry()).toMatchObject({ database: dbName(suite.dbs.url('source')), paused: 0 });
  }, 420_000);

  it('pgbouncer: the switch worker killed while PAUSE waits for a transaction in flight: never left paused, the switch completes on the retry', async () => {
    const env = { FERRY_CONN_POOLADMIN: pooler!.adminUrl };
    const id = 'switch-kill-pause';
    const first = await pooledMigration(id, 'switch-4');
    // A transaction through the pooler, open: PAUSE waits for it.
    const app = new Client({ connectionString: pooler!.url('app') });
    await app.connect();
    try {
      await app.query('BEGIN');
      await app.query('UPDATE pgbench_branches SET bbalance = bbalance + 7 WHERE bid = 1');
      await suite.stack.ferry.approve(id);
      await eventually(async () => (await poolerEntry()).paused === 1, 60_000);
      first.process.kill('SIGKILL');
      await first.exited;
      // PgBouncer keeps the pause of a console that died: the next attempt finds it.
      expect((await poolerEntry()).paused).toBe(1);
      await suite.stack.startWorkerProcessReady('switch-5', ['--task-queue', SWITCH_QUEUE], env);
      await eventually(async () => {
        const status = await suite.stack.ferry.status(id);
        return status.retrying?.activity === 'pausePool' && status.retrying.attempt >= 2;
      }, 60_000);
      await app.query('COMMIT');
    } finally {
      await app.end();
    }
    const result = await resultWithin(suite.stack.ferry, id, 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(suite.stack.ferry, result);
    // The transaction PAUSE waited for is on the target; PgBouncer points there, resumed.
    expect(await rowsAsText(suite.dbs, 'target', 'public.pgbench_branches', 'bid')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.pgbench_branches', 'bid'));
    expect((await suite.dbs.query<{ b: number }>('target', 'SELECT bbalance AS b FROM pgbench_branches WHERE bid = 1'))[0].b).toBe(7);
    expect(await poolerEntry()).toMatchObject({ database: dbName(suite.dbs.url('target')), paused: 0 });
  }, 300_000);

  it('pgbouncer: a PAUSE that outwaits cutover.maxWait is resumed and rolls back, and the transaction it waited for commits on the source', async () => {
    const id = 'switch-pause-outwaited';
    await pooledMigration(id, 'switch-7', pooler!.databasesFile, { maxWait: '3s' });
    const app = new Client({ connectionString: pooler!.url('app') });
    await app.connect();
    try {
      await app.query('BEGIN');
      await app.query('UPDATE pgbench_branches SET bbalance = bbalance + 11 WHERE bid = 1');
      await suite.stack.ferry.approve(id);
      const result = await resultWithin(suite.stack.ferry, id, 120_000);
      expect(result.state).toBe('FAILED');
      expect(result.error?.message).toMatch(/PgBouncer's PAUSE of app waited 3s for transactions in flight through the pooler/);
      // Never left paused: the transaction goes on and commits on the source, and new ones pass.
      expect(await poolerEntry()).toMatchObject({ database: dbName(suite.dbs.url('source')), paused: 0 });
      await app.query('COMMIT');
      await app.query('UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1');
    } finally {
      await app.end();
    }
    expect((await suite.dbs.query<{ b: number }>('source', 'SELECT bbalance AS b FROM pgbench_branches WHERE bid = 1'))[0].b).toBe(12);
    expect(await suite.dbs.query('target', `SELECT to_regclass('public.pgbench_branches') AS t`)).toEqual([{ t: null }]);
  }, 300_000);

  it('refuses a PgBouncer switch that cannot work in preflight, exit 2, naming the field and changing nothing', async () => {
    const specFile = (name: string, pgbouncer: Record<string, unknown>) => {
      const path = join(dir, `${name}.json`);
      writeFileSync(path, JSON.stringify(onlineSpec(name, { pgbouncer: { admin: 'pooladmin', database: 'app', configFile: pooler!.databasesFile, taskQueue: SWITCH_QUEUE, ...pgbouncer } })));
      return path;
    };
    // No switch worker serves the queue.
    const noWorker = await suite.stack.runCli(['start', specFile('switch-no-worker', { taskQueue: 'ferry-switch-nobody' })]);
    expect(noWorker.code).toBe(2);
    expect(noWorker.stderr).toContain('cutover.switch.pgbouncer.taskQueue: no switch worker took the check on task queue ferry-switch-nobody');
    await suite.stack.startWorkerProcessReady('switch-6', ['--task-queue', SWITCH_QUEUE], { FERRY_CONN_POOLADMIN: pooler!.adminUrl });
    // A database PgBouncer does not have; a file without its entry.
    const unknown = await suite.stack.runCli(['start', specFile('switch-unknown-db', { database: 'shop' })]);
    expect([unknown.code, unknown.stderr]).toEqual([2, expect.stringContaining('cutover.switch.pgbouncer.database: PgBouncer has no database shop')]);
    const empty = join(dir, 'empty.ini');
    writeFileSync(empty, '[databases]\n');
    const noEntry = await suite.stack.runCli(['start', specFile('switch-no-entry', { configFile: empty })]);
    expect([noEntry.code, noEntry.stderr]).toEqual([2, expect.stringContaining(`cutover.switch.pgbouncer.configFile: ${empty} has no entry for database app`)]);
    // Nothing was started: no capture on the source, no table on the target.
    expect(await suite.dbs.query('source', `SELECT nspname FROM pg_namespace WHERE nspname LIKE '\\_ferry%'`)).toEqual([]);
    expect(await suite.dbs.query('target', `SELECT to_regclass('public.pgbench_accounts') AS t`)).toEqual([{ t: null }]);
    expect(await poolerEntry()).toMatchObject({ database: dbName(suite.dbs.url('source')), paused: 0 });
  }, 300_000);

  it('webhook: a switcher that answers 500 at switched rolls back with the source taking writes again, each request signed', async () => {
    const receiver = await Receiver.start();
    try {
      receiver.answer('/switch', 200, 500);
      const spec = onlineSpec('switch-webhook', { webhook: { url: `${receiver.url}/switch`, secret: 'FERRY_SECRET_SWITCH', timeout: '10s' } });
      const { id } = await suite.stack.ferry.start({ ...spec, cutover: { ...spec.cutover, approval: 'auto' } });
      const result = await resultWithin(suite.stack.ferry, id, 180_000);
      expect(result.state).toBe('FAILED');
      expect(result.error?.message).toMatch(/the switch webhook answered HTTP 500 at switched/);
      const stages = receiver.to('/switch').map((d) => [d.json.stage, d.answered, signatureVerifies(d, SECRET)]);
      expect(stages).toEqual([
        ['paused', 200, true],
        ['switched', 500, true],
        ['reverted', 200, true],
      ]);
      // Unfrozen: the source takes a write; the target's tables are gone.
      await suite.dbs.exec('source', 'UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1');
      expect(await suite.dbs.query('target', `SELECT to_regclass('public.pgbench_accounts') AS t`)).toEqual([{ t: null }]);
    } finally {
      await receiver.close();
    }
  }, 300_000);
});
