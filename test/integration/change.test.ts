/**
 * Change plans on a real PostgreSQL under pgbench's writes, with `ferry worker` processes that
 * get SIGKILLed: a column added, 200,000 rows backfilled across a kill (each row exactly once,
 * counted by a trigger of the test's own), an index built concurrently, SET NOT NULL the safe
 * way; an index build killed mid-way leaves no INVALID index once retried.
 */
import os from 'node:os';
import { Client } from 'pg';
import { runningActivities } from '../helpers/chaos';
import { activityStarts } from '../helpers/history';
import { awaitRetry, HeldLock, Killed } from '../helpers/kills';
import { pgbenchSeed, PGBENCH } from '../helpers/pgbench';
import { eventually, RunningProcessWorker } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { spawn } from 'node:child_process';

const ROWS = 200_000;

/** pgbench's TPC-B (updates of pgbench_accounts, no inserts) until stopped. */
function startTpcb(url: string, clients = 2): { stop: () => Promise<void> } {
  const child = spawn(PGBENCH, ['-n', '-c', String(clients), '-j', '1', '-T', '600', '-b', 'tpcb-like', url], { stdio: 'ignore' });
  const done = new Promise<void>((r) => child.on('exit', () => r()));
  return {
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      await done;
    },
  };
}

/**
 * A writer of its own that times each single-row update: what an application would wait. Its
 * own lock_timeout of 2 s turns any lock wait longer than that into a counted error (55P03).
 */
function startProbe(url: string): { stop: () => Promise<{ count: number; maxMs: number; lockWaitsOver2s: number }> } {
  let running = true;
  const stats = { count: 0, maxMs: 0, lockWaitsOver2s: 0 };
  const loop = (async () => {
    const c = new Client({ connectionString: url, application_name: 'latency-probe' });
    await c.connect();
    await c.query(`SET lock_timeout = '2s'`);
    while (running) {
      const t = Date.now();
      try {
        await c.query('UPDATE public.pgbench_accounts SET abalance = abalance + 1 WHERE aid = $1', [1 + Math.floor(Math.random() * ROWS)]);
      } catch (err) {
        if ((err as { code?: string }).code !== '55P03') throw err;
        stats.lockWaitsOver2s += 1;
      }
      stats.maxMs = Math.max(stats.maxMs, Date.now() - t);
      stats.count += 1;
      await new Promise((r) => setTimeout(r, 20));
    }
    await c.end();
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return stats;
    },
  };
}

describe('change plans under load, with workers killed', () => {
  let workers: RunningProcessWorker[];

  const suite = stackSuite({
    name: 'change',
    databases: { app: '' },
    workers: 0,
    // Counts, per row, the updates that changed `note` (the column the plan adds): the proof
    // that the backfill touched every row exactly once. to_jsonb: it runs before the column exists.
    seed: pgbenchSeed(
      'app',
      2,
      `CREATE TABLE public.note_writes (aid int PRIMARY KEY, n int NOT NULL);
       CREATE FUNCTION public.count_note_writes() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF to_jsonb(NEW) -> 'note' IS DISTINCT FROM to_jsonb(OLD) -> 'note' THEN
           INSERT INTO public.note_writes VALUES (NEW.aid, 1) ON CONFLICT (aid) DO UPDATE SET n = note_writes.n + 1;
         END IF;
         RETURN NEW;
       END $$;
       CREATE TRIGGER count_note_writes AFTER UPDATE ON public.pgbench_accounts FOR EACH ROW EXECUTE FUNCTION public.count_note_writes();
       ANALYZE public.pgbench_accounts;`,
    ),
    ready: async () => {
      workers = [await suite.stack.startWorkerProcessReady('w1'), await suite.stack.startWorkerProcessReady('w2')];
    },
  });

  /** Kills the worker that runs `activity` of `id` right now, heartbeating; returns what was killed. */
  async function killRunning(id: string, activity: string, ready: () => Promise<boolean> = async () => true): Promise<Killed> {
    const target = await eventually(async () => {
      const running = await runningActivities(suite.stack.ferry, [id]);
      const a = running.find((r) => r.activity === activity && r.heartbeating);
      return a && (await ready()) ? a : undefined;
    }, 90_000, 100);
    const victim = workers.find((w) => w.identity === target.worker)!;
    victim.process.kill('SIGKILL');
    await victim.exited;
    // A fresh worker takes the dead one's place, so two remain for the next kill.
    workers = [...workers.filter((w) => w !== victim), await suite.stack.startWorkerProcessReady(`${victim.identity}-again`)];
    return { ...target, at: Date.now() };
  }

  it('adds a column, backfills every row exactly once across a SIGKILL, builds the index concurrently and sets NOT NULL, writers never stalled', async () => {
    const url = suite.dbs.url('app');
    const load = startTpcb(url);
    const probe = startProbe(url);
    let latency = { count: 0, maxMs: 0, lockWaitsOver2s: 0 };
    // A write transaction open when the plan starts (a batch job), until 4 s after the ALTER was
    // first seen waiting for its lock: its first attempt cannot have the lock. Without a
    // lock_timeout, every writer would queue behind the waiting ALTER all that time; with it,
    // the ALTER gives up and tries again. (A fixed 6 s from here was too short when the plan
    // took long to start on a busy machine.)
    const batch = new Client({ connectionString: url, application_name: 'batch-job' });
    await batch.connect();
    await batch.query('BEGIN');
    await batch.query('LOCK TABLE public.pgbench_accounts IN ROW EXCLUSIVE MODE');
    const batchDone = (async () => {
      try {
        const alterWaiting = `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%ADD COLUMN note%' AND pid <> pg_backend_pid()`;
        await eventually(async () => (await suite.dbs.query('app', alterWaiting)).length > 0, 90_000, 100);
        await new Promise((r) => setTimeout(r, 4_000));
      } finally {
        await batch.query('COMMIT');
        await batch.end();
      }
    })();
    batchDone.catch(() => undefined);
    try {
      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'add-note',
        database: 'app',
        throttle: { rowsPerSecond: 25_000 },
        steps: [
          // lock_timeout 1.5 s (2 s by default): a writer queued behind an ALTER waits for the
          // ALTER's own wait and then its run, and the probe below counts any wait past 2 s.
          { sql: 'ALTER TABLE public.pgbench_accounts ADD COLUMN note text', down: 'ALTER TABLE public.pgbench_accounts DROP COLUMN note', lockTimeout: '1500ms' },
          { backfill: { table: 'public.pgbench_accounts', set: { note: "'n/a'" }, where: 'note IS NULL', batchRows: 2000, until: 'all' } },
          { index: { table: 'public.pgbench_accounts', name: 'accounts_note_idx', columns: ['note'] } },
          { sql: 'ALTER TABLE public.pgbench_accounts ALTER COLUMN note SET NOT NULL', lockTimeout: '1500ms' },
        ],
      });
      // Killed once a third of the rows are committed, while the slice is running.
      const killed = await killRunning(id, 'backfillSlice', async () => {
        const rows = await suite.dbs.query<{ n: string }>('app', 'SELECT coalesce(sum(rows_updated), 0) AS n FROM _ferry_change.backfills').catch(() => [{ n: '0' }]);
        return Number(rows[0].n) > ROWS / 3;
      });
      expect(await awaitRetry(suite.stack.ferry, killed)).toMatchObject({ attempt: killed.attempt + 1, endedBy: 'heartbeat timeout' });
      const result = await suite.stack.ferry.changeResult(id);
      expect(result.error).toBeNull();
      expect(result.state).toBe('SUCCEEDED');
      expect(result.steps.map((s) => s.state)).toEqual(['SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED']);
      // The ALTER waited out the batch job in attempts of 1.5 s.
      expect(result.steps[0].attempts).toBeGreaterThan(1);
      // The second pass of until: all found nothing left.
      expect(result.steps[1].passes).toBe(2);
      expect(result.rowsBackfilled).toBe(ROWS);
      expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['StepStarted', 'StepCompleted', 'BackfillProgress', 'ChangeFinished']));
    } finally {
      await batchDone;
      await load.stop();
      latency = await probe.stop();
    }

    // Every row backfilled, each exactly once.
    const [counts] = await suite.dbs.query<{ rows: string; min: number; max: number }>('app', 'SELECT count(*) AS rows, min(n) AS min, max(n) AS max FROM public.note_writes');
    expect({ rows: Number(counts.rows), min: counts.min, max: counts.max }).toEqual({ rows: ROWS, min: 1, max: 1 });
    const [notes] = await suite.dbs.query<{ missing: string; total: string }>('app', `SELECT count(*) FILTER (WHERE note IS DISTINCT FROM 'n/a') AS missing, count(*) AS total FROM public.pgbench_accounts`);
    expect({ missing: Number(notes.missing), total: Number(notes.total) }).toEqual({ missing: 0, total: ROWS });
    // The index is valid, the column NOT NULL, the helper CHECK gone, the bookkeeping removed.
    const [catalog] = await suite.dbs.query<{ valid: boolean; not_null: boolean; checks: string; bookkeeping: boolean }>(
      'app',
      `SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = 'public.accounts_note_idx'::regclass) AS valid,
              (SELECT attnotnull FROM pg_attribute WHERE attrelid = 'public.pgbench_accounts'::regclass AND attname = 'note') AS not_null,
              (SELECT count(*) FROM pg_constraint WHERE conrelid = 'public.pgbench_accounts'::regclass AND contype = 'c') AS checks,
              to_regnamespace('_ferry_change') IS NOT NULL AS bookkeeping`,
    );
    expect({ ...catalog, checks: Number(catalog.checks) }).toEqual({ valid: true, not_null: true, checks: 0, bookkeeping: false });
    // No writer waited on a lock for more than 2 s, nor for its update much longer.
    process.stderr.write(`change: probe writer ${latency.count} updates, longest ${latency.maxMs} ms, lock waits past 2 s ${latency.lockWaitsOver2s}\n`);
    expect(latency.count).toBeGreaterThan(100);
    expect(latency.lockWaitsOver2s).toBe(0);
    expect(latency.maxMs).toBeLessThan(3_000);
  });

  it('an index build killed mid-way leaves an INVALID index, which the retry drops before building it valid', async () => {
    // An open write transaction keeps CREATE INDEX CONCURRENTLY waiting after its catalog entry
    // exists (as INVALID): the build is killed there.
    const hold = await HeldLock.take(suite.dbs.url('app'), 'open writer', ['UPDATE public.pgbench_accounts SET abalance = abalance WHERE aid = 1']);
    let released = false;
    try {
      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'index-killed',
        database: 'app',
        steps: [{ index: { table: 'public.pgbench_accounts', name: 'accounts_bid_abalance_idx', columns: ['bid', 'abalance'] } }],
      });
      const invalid = () =>
        suite.dbs.query<{ valid: boolean }>('app', `SELECT i.indisvalid AS valid FROM pg_index i WHERE i.indexrelid = to_regclass('public.accounts_bid_abalance_idx')`);
      const killed = await killRunning(id, 'buildChangeIndex', async () => (await invalid()).some((r) => r.valid === false));
      expect(await invalid()).toEqual([{ valid: false }]);
      await hold.release();
      released = true;
      expect(await awaitRetry(suite.stack.ferry, killed)).toMatchObject({ endedBy: 'heartbeat timeout' });
      const result = await suite.stack.ferry.changeResult(id);
      expect(result.state).toBe('SUCCEEDED');
      expect(result.steps[0].note).toMatch(/dropped INVALID accounts_bid_abalance_idx/);
    } finally {
      if (!released) await hold.release();
    }
    const indexes = await suite.dbs.query<{ name: string; valid: boolean }>(
      'app',
      `SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'public.pgbench_accounts'::regclass ORDER BY 1`,
    );
    expect(indexes).toEqual([
      { name: 'accounts_bid_abalance_idx', valid: true },
      { name: 'accounts_note_idx', valid: true },
      { name: 'pgbench_accounts_pkey', valid: true },
    ]);
  });

  it('shows each step with its progress in ferry status while a backfill runs, pause holds it, and every control signal is on record with who sent it and why', async () => {
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'status-lines',
      database: 'app',
      throttle: { rowsPerSecond: 5_000 },
      steps: [{ backfill: { table: 'public.pgbench_accounts', set: { abalance: 'abalance' }, batchRows: 1000 } }],
    });
    const running = await eventually(async () => {
      const s = await suite.stack.ferry.changeStatus(id);
      return s.steps[0].state === 'RUNNING' && (s.steps[0].progress?.done ?? 0) > 0 ? s : undefined;
    });
    expect(running.steps[0].progress).toMatchObject({ unit: 'rows', total: expect.any(Number) });
    const cli = await suite.stack.runCli(['status', id]);
    expect(cli.code).toBe(0);
    expect(cli.stdout).toMatch(/1\. RUNNING\s+backfill public\.pgbench_accounts \(abalance\)\s+\d+\/\d+ rows/);
    expect((await suite.stack.runCli(['pause', id, '--reason', 'vacuum window'])).code).toBe(0);
    const paused = await eventually(async () => {
      const s = await suite.stack.ferry.changeStatus(id);
      return s.waiting?.startsWith('paused') ? s : undefined;
    });
    expect(paused.paused).toBe(true);
    // Paused: the slice running at the pause ended, and no batch commits until resume (the
    // checkpoint table says so, before and after a throttle change has gone through).
    await eventually(async () => !(await runningActivities(suite.stack.ferry, [id])).some((a) => a.activity === 'backfillSlice'));
    const held = await checkpointRows();
    await suite.stack.ferry.throttle(id, { rowsPerSecond: 50_000 });
    await eventually(async () => (await suite.stack.ferry.changeStatus(id)).throttle.rowsPerSecond === 50_000);
    expect(await checkpointRows()).toBe(held);
    expect((await suite.stack.runCli(['resume', id, '--actor', 'oncall-bob'])).code).toBe(0);
    await eventually(async () => (await checkpointRows()) > held);
    await suite.stack.ferry.cancel(id, 'test over', 'alice');
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.state).toBe('CANCELLED');
    expect(result.error?.message).toBe('test over (by alice)');
    expect(result.steps[0].state).toBe('FAILED');
    // Each control signal, in order, with its actor (the CLI's OS user unless --actor) and reason.
    const user = os.userInfo().username;
    expect(result.controls?.map(({ at: _at, ...c }) => c)).toEqual([
      { machine: 'control', signal: 'pause', from: 'running', to: 'paused', actor: user, reason: 'vacuum window' },
      { machine: 'control', signal: 'throttle', from: '5000 rows/s', to: '50000 rows/s' },
      { machine: 'control', signal: 'resume', from: 'paused', to: 'running', actor: 'oncall-bob' },
      { machine: 'control', signal: 'cancel', from: 'running', to: 'cancelling', actor: 'alice', reason: 'test over' },
    ]);
    expect(result.events.filter((e) => e.type === 'ControlReceived').map((e) => e.detail?.signal)).toEqual(['pause', 'throttle', 'resume', 'cancel']);

    async function checkpointRows(): Promise<number> {
      const rows = await suite.dbs.query<{ n: string }>('app', `SELECT coalesce(sum(rows_scanned), 0) AS n FROM _ferry_change.backfills WHERE change_id = $1`, [id]);
      return Number(rows[0].n);
    }
  });

  it('holds a backfill while more sessions than maxActiveSessions are active, and goes on once they end', async () => {
    // Six sessions of the test's own, busy in pg_sleep: more than the plan's limit of three.
    const busy = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const c = new Client({ connectionString: suite.dbs.url('app'), application_name: 'ferry-test-busy' });
        await c.connect();
        c.on('error', () => undefined);
        return c;
      }),
    );
    const sleeping = busy.map((c) => c.query('SELECT pg_sleep(600)').catch(() => undefined));
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'busy-database',
      database: 'app',
      throttle: { maxActiveSessions: 3 },
      steps: [{ backfill: { table: 'public.pgbench_accounts', set: { filler: "'checked'" }, batchRows: 1000 } }],
    });
    try {
      const held = await eventually(async () => (await suite.stack.ferry.changeStatus(id)).waiting?.match(/^(\d+) active sessions > maxActiveSessions 3$/), 60_000);
      expect(Number(held[1])).toBeGreaterThanOrEqual(6);
      // It looked again, twice, and still did nothing: no batch committed.
      await eventually(async () => (await activityStarts(suite.stack.client, id)).filter((a) => a.activityType === 'backfillSlice').length >= 3, 60_000, 500);
      expect(await updated()).toBe(0);
      expect((await suite.stack.ferry.changeStatus(id)).steps[0].state).toBe('RUNNING');
    } finally {
      await suite.dbs.query('app', `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ferry-test-busy'`);
      await Promise.all(sleeping);
      await Promise.all(busy.map((c) => c.end().catch(() => undefined)));
    }
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.state).toBe('SUCCEEDED');
    expect(await updated()).toBe(ROWS);

    async function updated(): Promise<number> {
      const rows = await suite.dbs.query<{ n: string }>('app', `SELECT count(*) AS n FROM public.pgbench_accounts WHERE filler = 'checked'`);
      return Number(rows[0].n);
    }
  });

  it('a backfill whose history grows long continues as new between slices and updates every row exactly once', async () => {
    await suite.dbs.exec('app', 'CREATE TABLE public.balances_before AS SELECT aid, abalance FROM public.pgbench_accounts');
    const { id, runId } = await suite.stack.ferry.startChange(
      {
        kind: 'change',
        id: 'long-backfill',
        database: 'app',
        throttle: { rowsPerSecond: 8_000 },
        steps: [{ sql: 'SELECT 1' }, { backfill: { table: 'public.pgbench_accounts', set: { abalance: 'abalance + 1' }, batchRows: 1000 } }],
      },
      { historyLimit: 40 },
    );
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.state).toBe('SUCCEEDED');
    // Handed over at least once: the first run closed CONTINUED_AS_NEW.
    expect((await suite.stack.client.workflow.getHandle(id, runId).describe()).status.name).toBe('CONTINUED_AS_NEW');
    // Every row once: each balance is its frozen value plus one.
    const [rows] = await suite.dbs.query<{ n: string; wrong: string }>(
      'app',
      `SELECT count(*) AS n, count(*) FILTER (WHERE a.abalance <> b.abalance + 1) AS wrong FROM public.pgbench_accounts a JOIN public.balances_before b USING (aid)`,
    );
    expect({ n: Number(rows.n), wrong: Number(rows.wrong) }).toEqual({ n: ROWS, wrong: 0 });
    // One story across the runs: each step started and completed once, events numbered without a gap.
    const seqs = result.events.map((e) => e.seq);
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0] + i));
    expect(result.events.filter((e) => e.type === 'StepStarted').map((e) => e.step)).toEqual([0, 1]);
    expect(result.events.filter((e) => e.type === 'StepCompleted').map((e) => e.step)).toEqual([0, 1]);
    expect(result.steps.map((s) => s.state)).toEqual(['SUCCEEDED', 'SUCCEEDED']);
    expect(result.rowsBackfilled).toBe(ROWS);
  });
});
