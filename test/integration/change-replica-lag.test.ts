/**
 * A backfill held by `maxReplicaLag` on a real streaming standby: a private primary and a
 * pg_basebackup'd hot standby whose replay is delayed by recovery_min_apply_delay, so the
 * primary's pg_stat_replication.replay_lag reads seconds while a writer of the test's own keeps
 * WAL coming. The backfill must wait, say why in `ferry status` and update nothing; once the
 * delay is removed and the lag has fallen below the limit it must update every row exactly once.
 */
import { Client } from 'pg';
import { activityStarts } from '../helpers/history';
import { startStreamingPair, StreamingPair } from '../helpers/private-cluster';
import { eventually } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const ROWS = 20_000;
const LIMIT_MS = 1_000;
const DELAY = '5s';

/** The primary's replay lag in ms (max over its standbys; null when it shows none) and when it was read, by the primary's clock. */
async function replayLag(c: Client): Promise<{ ms: number | null; at: Date }> {
  const { rows } = await c.query<{ ms: number | null; at: Date }>(
    `SELECT (max(extract(epoch FROM replay_lag)) * 1000)::float8 AS ms, clock_timestamp() AS at FROM pg_catalog.pg_stat_replication`,
  );
  return rows[0];
}

/** Sets the standby's recovery_min_apply_delay (ALTER SYSTEM cannot run in a transaction block: one statement per query). */
async function setApplyDelay(standbyUrl: string, delay: string): Promise<void> {
  const c = new Client({ connectionString: standbyUrl });
  await c.connect();
  try {
    await c.query(`ALTER SYSTEM SET recovery_min_apply_delay = '${delay}'`);
    await c.query('SELECT pg_reload_conf()');
    // The reload is asynchronous: wait until this standby's sessions see the new value.
    await eventually(async () => {
      const fresh = new Client({ connectionString: standbyUrl });
      await fresh.connect();
      try {
        const { rows } = await fresh.query<{ ms: number }>(`SELECT setting::int AS ms FROM pg_settings WHERE name = 'recovery_min_apply_delay'`);
        return rows[0].ms === (delay === '0' ? 0 : Number.parseInt(delay, 10) * 1000);
      } finally {
        await fresh.end();
      }
    }, 10_000);
  } finally {
    await c.end();
  }
}

/** An insert every 100 ms on the primary: WAL keeps coming, so the delayed standby's replay position keeps falling behind. */
function startTicker(url: string): { stop: () => Promise<number> } {
  let running = true;
  let ticks = 0;
  const loop = (async () => {
    const c = new Client({ connectionString: url, application_name: 'ferry-test-ticker' });
    await c.connect();
    try {
      while (running) {
        await c.query('INSERT INTO public.ticks DEFAULT VALUES');
        ticks += 1;
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await c.end();
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return ticks;
    },
  };
}

/** Reads the replay lag every 200 ms until stopped; every reading kept. */
function startSampler(c: Client): { samples: { ms: number | null; at: Date }[]; stop: () => Promise<void> } {
  let running = true;
  const samples: { ms: number | null; at: Date }[] = [];
  const loop = (async () => {
    while (running) {
      samples.push(await replayLag(c));
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  return {
    samples,
    async stop() {
      running = false;
      await loop;
    },
  };
}

describe('a backfill under maxReplicaLag, against a primary with a lagging streaming standby', () => {
  let pair: StreamingPair;
  let monitor: Client;

  const suite = stackSuite({
    name: 'replica_lag',
    // The standby reports its replay position every second even when no WAL arrives.
    server: async () => {
      pair = await startStreamingPair({}, { wal_receiver_status_interval: "'1s'" });
      return { url: pair.primary.url, stop: () => pair.stop() };
    },
    databases: {
      // `stamped` is what the plan sets; stamp_writes counts, per row, the updates that changed it
      // and when (the primary's clock): the proof of exactly once, and of when rows were touched.
      app: `CREATE TABLE public.items (id int PRIMARY KEY, stamped boolean NOT NULL DEFAULT false);
       INSERT INTO public.items (id) SELECT generate_series(1, ${ROWS});
       CREATE TABLE public.ticks (n bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());
       CREATE TABLE public.stamp_writes (id int PRIMARY KEY, n int NOT NULL, first_at timestamptz NOT NULL);
       CREATE FUNCTION public.count_stamp_writes() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.stamped IS DISTINCT FROM OLD.stamped THEN
           INSERT INTO public.stamp_writes VALUES (NEW.id, 1, clock_timestamp()) ON CONFLICT (id) DO UPDATE SET n = stamp_writes.n + 1;
         END IF;
         RETURN NEW;
       END $$;
       CREATE TRIGGER count_stamp_writes AFTER UPDATE ON public.items FOR EACH ROW EXECUTE FUNCTION public.count_stamp_writes();
       ANALYZE public.items;`,
    },
    workers: 0,
    workerProcesses: ['w1'],
    // The standby really streams: the primary lists it, and the new table's rows reached it.
    seed: async (dbs) => {
      monitor = new Client({ connectionString: pair.primary.url });
      await monitor.connect();
      const standbyApp = new URL(dbs.url('app'));
      standbyApp.port = String(pair.standby.port);
      await eventually(async () => {
        const c = new Client({ connectionString: standbyApp.toString() });
        await c.connect();
        try {
          return (await c.query<{ n: number }>('SELECT count(*)::int AS n FROM public.items')).rows[0].n === ROWS;
        } finally {
          await c.end();
        }
      }, 30_000, 250);
      expect((await monitor.query(`SELECT state FROM pg_stat_replication`)).rows).toEqual([{ state: 'streaming' }]);
    },
    cleanup: async () => {
      await monitor?.end().catch(() => undefined);
    },
  });

  it('waits while replay lag exceeds maxReplicaLag, updating no row, and updates every row exactly once after the lag falls', async () => {
    const ticker = startTicker(suite.dbs.url('app'));
    let sampler: ReturnType<typeof startSampler> | undefined;
    try {
      await setApplyDelay(pair.standby.url, DELAY);
      // Lag is real before the plan starts: several seconds behind.
      await eventually(async () => ((await replayLag(monitor)).ms ?? 0) > 3 * LIMIT_MS, 30_000, 200);
      sampler = startSampler(monitor);

      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'replica-lag',
        database: 'app',
        throttle: { maxReplicaLag: '1s' },
        steps: [{ backfill: { table: 'public.items', set: { stamped: 'true' }, where: 'NOT stamped', batchRows: 1000 } }],
      });
      // Status says why it waits, with the lag it read (a backfill that never waits ends instead).
      const first = await eventually(async () => {
        const s = await suite.stack.ferry.changeStatus(id);
        return s.waiting || s.endedAt ? s : undefined;
      }, 60_000);
      // (Both in one expectation: a failure shows what the status said and what the rows went through.)
      expect({ waiting: first.waiting, rows: await stampedRows() }).toEqual({
        waiting: expect.stringMatching(/^replica replay lag \d+ ms > maxReplicaLag 1000 ms$/),
        rows: { stamped: 0, writes: 0 },
      });
      expect(Number(/(\d+) ms >/.exec(first.waiting!)![1])).toBeGreaterThan(3 * LIMIT_MS);
      // It looked again, twice, and still did nothing: no row updated, the step still running.
      await eventually(async () => (await activityStarts(suite.stack.client, id)).filter((a) => a.activityType === 'backfillSlice').length >= 3, 60_000, 500);
      expect(await stampedRows()).toEqual({ stamped: 0, writes: 0 });
      const holding = await suite.stack.ferry.changeStatus(id);
      expect(holding.steps[0].state).toBe('RUNNING');
      expect(holding.waiting).toMatch(/^replica replay lag \d+ ms > maxReplicaLag 1000 ms$/);

      // Still over the limit at the release.
      const release = await replayLag(monitor);
      expect(release.ms).toBeGreaterThan(LIMIT_MS);
      await setApplyDelay(pair.standby.url, '0');
      // The standby catches up; the primary's reading falls below the limit.
      await eventually(async () => ((await replayLag(monitor)).ms ?? 0) < LIMIT_MS, 60_000, 100);
      await sampler.stop();

      const result = await suite.stack.ferry.changeResult(id);
      expect(result.error).toBeNull();
      expect(result.state).toBe('SUCCEEDED');
      expect(result.steps.map((s) => s.state)).toEqual(['SUCCEEDED']);
      expect(result.rowsBackfilled).toBe(ROWS);
      // The result's progress events all come after the release.
      const progress = result.events.filter((e) => e.type === 'BackfillProgress');
      expect(progress.length).toBeGreaterThan(0);
      expect(progress.filter((e) => Date.parse(e.at) < release.at.getTime())).toEqual([]);
    } finally {
      await sampler?.stop();
      await ticker.stop();
      await setApplyDelay(pair.standby.url, '0');
    }

    // From before the plan started until the reading fell below the limit, every sample was over
    // it up to the release, and no row was updated before the last sample over the limit.
    const samples = sampler!.samples;
    const over = samples.filter((s) => (s.ms ?? 0) > LIMIT_MS);
    const beforeRelease = samples.filter((s) => s.at.getTime() <= over[over.length - 1].at.getTime());
    expect(beforeRelease.length).toBeGreaterThan(20);
    expect(beforeRelease.filter((s) => (s.ms ?? 0) <= LIMIT_MS)).toEqual([]);
    const [writes] = await suite.dbs.query<{ rows: number; min: number; max: number; first: Date }>(
      'app',
      'SELECT count(*)::int AS rows, min(n) AS min, max(n) AS max, min(first_at) AS first FROM public.stamp_writes',
    );
    expect({ rows: writes.rows, min: writes.min, max: writes.max }).toEqual({ rows: ROWS, min: 1, max: 1 });
    expect(writes.first.getTime()).toBeGreaterThan(over[over.length - 1].at.getTime());
    expect(await stampedRows()).toEqual({ stamped: ROWS, writes: ROWS });
  });

  async function stampedRows(): Promise<{ stamped: number; writes: number }> {
    const [r] = await suite.dbs.query<{ stamped: number; writes: number }>(
      'app',
      `SELECT (SELECT count(*)::int FROM public.items WHERE stamped) AS stamped, (SELECT coalesce(sum(n), 0)::int FROM public.stamp_writes) AS writes`,
    );
    return r;
  }
});
