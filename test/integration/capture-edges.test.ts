/**
 * Capture at its edges, Ferry's activities called directly on a private wal_level=logical
 * cluster (wal_sender_timeout 10 s, as a busy production source might set it): a consumer that
 * works longer than the WAL sender's timeout before its next commit, a key stored out of line, a
 * key that pgoutput never sends, a slot still being created when a retry looks for it, a table
 * a subscription writes, and the tables of a legacy inheritance tree. Each of these lost rows,
 * stalled capture for good, or let writes reach the old database after the cutover.
 */
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { Client } from 'pg';
import { CaptureTable } from '../../activities/capture';
import { parseSpec } from '../../src/core/spec';
import { quoteQualified } from '../../src/core/identifiers';
import { captureNames } from '../../src/db/capture-sql';
import { copyTableOf, MigrationPlan } from '../../src/core/plan';
import { assertCaptureIntact, captureSuspects } from '../../src/db/capture-check';
import { logicalNames } from '../../src/db/logical-sql';
import { TestDatabases } from '../helpers/databases';
import { DirectActivities, directActivities } from '../helpers/direct-activities';
import { LogicalCluster, startLogicalCluster } from '../helpers/logical-cluster';
import { eventually } from '../helpers/stack';

let cluster: LogicalCluster;
let dbs: TestDatabases;
let direct: DirectActivities;

beforeAll(async () => {
  cluster = await startLogicalCluster({ wal_sender_timeout: '10000', wal_retrieve_retry_interval: '200', max_logical_replication_workers: '4' });
  dbs = await TestDatabases.create('capture_edges', ['source', 'target', 'upstream'], cluster.url);
  direct = directActivities(dbs);
}, 120_000);

// The cluster goes whole (its subscription keeps the source database from being dropped alone).
afterAll(async () => {
  await direct?.close();
  await cluster?.stop();
});

const captureTables = (plan: MigrationPlan): CaptureTable[] => plan.tables.map((t) => ({ index: t.index, source: t.source, keyColumns: t.keyColumns }));

async function preflight(id: string, tables: string[], extra: Record<string, unknown> = {}): Promise<MigrationPlan> {
  const spec = parseSpec({ id, source: 'src', target: 'dst', mode: 'online', tables, ...extra });
  return direct.run(() => direct.activities.preflight({ migrationId: id, spec }));
}

/** Preflight and capture (with the armed freeze) as an online migration installs them. */
async function captured(id: string, tables: string[], capture: 'logical' | 'trigger'): Promise<MigrationPlan> {
  const plan = await preflight(id, tables, { capture });
  await direct.run(() => direct.activities.installCapture({ migrationId: id, source: 'src', tables: captureTables(plan), armFreeze: true, logical: capture === 'logical' }));
  return plan;
}

/** The change log of a migration's table, qualified. */
const logOf = (id: string, index = 0): string => quoteQualified(captureNames(id, index).log);

/** A consumer slice running as an activity would, cancelled by `stop()`; `done` settles with its outcome. */
function consumer(id: string, plan: MigrationPlan, sliceMs = 120_000) {
  const env = new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') });
  const done = env.run(() => direct.activities.streamChanges({ migrationId: id, source: 'src', tables: captureTables(plan), sliceMs }));
  const outcome = done.then(
    (r) => ({ ended: 'returned' as const, value: r }),
    (err: unknown) => ({ ended: err instanceof CancelledFailure ? ('cancelled' as const) : ('failed' as const), error: err }),
  );
  return {
    outcome,
    async stop() {
      env.cancel();
      return outcome;
    },
  };
}

/** Waits for `condition` while the consumer runs; a consumer that ends first fails the wait with its outcome. */
async function whileStreaming<T>(stream: ReturnType<typeof consumer>, condition: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> {
  const ended = stream.outcome.then((o) => {
    throw new Error(`the consumer ended before the condition held: ${o.ended}${'error' in o ? ` (${String(o.error)})` : ''}`);
  });
  return Promise.race([eventually(condition, timeoutMs), ended]);
}

/** Both sides' text of a position, compared on the server. */
async function lsnAtLeast(a: string | null, b: string): Promise<boolean> {
  return (await dbs.query<{ p: boolean | null }>('source', 'SELECT $1::pg_lsn >= $2::pg_lsn AS p', [a, b]))[0].p === true;
}

describe('logical capture', () => {
  it('answers the WAL sender while it works longer than wal_sender_timeout on one transaction, and queues all of it', async () => {
    await dbs.exec('source', `CREATE TABLE public.slow (id int PRIMARY KEY, n int NOT NULL);
      INSERT INTO public.slow SELECT g, 0 FROM generate_series(1, 20000) g;`);
    const plan = await captured('keepalive', ['public.slow'], 'logical');
    const log = logOf('keepalive');
    // The consumer writes a transaction's keys 5,000 at a time as they arrive, confirming only
    // its commit: each write now takes 4 s, so 20,000 keys keep it from any commit for 16 s.
    await dbs.exec('source', `CREATE FUNCTION public.slow_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(4); RETURN NULL; END $$;
      CREATE TRIGGER slow_log AFTER INSERT ON ${log} FOR EACH STATEMENT EXECUTE FUNCTION public.slow_log();`);
    const stream = consumer('keepalive', plan);
    let ended;
    try {
      const [{ lsn: committed }] = await dbs.query<{ lsn: string }>('source', 'UPDATE public.slow SET n = n + 1 RETURNING pg_current_wal_lsn()::text AS lsn');
      await whileStreaming(
        stream,
        async () => {
          const [row] = await dbs.query<{ keys: number; confirmed: string | null }>(
            'source',
            `SELECT (SELECT count(DISTINCT pk)::int FROM ${log}) AS keys, (SELECT confirmed_lsn::text FROM _ferry_capture.slots) AS confirmed`,
          );
          return row.keys === 20_000 && (await lsnAtLeast(row.confirmed, committed));
        },
        90_000,
      );
      // The slot moved with it: the WAL it held is released.
      const [{ flushed }] = await dbs.query<{ flushed: string }>('source', `SELECT confirmed_flush_lsn::text AS flushed FROM pg_replication_slots WHERE slot_name LIKE 'ferry\\_slot\\_%'`);
      expect(await lsnAtLeast(flushed, committed)).toBe(true);
    } finally {
      ended = await stream.stop();
      await dbs.exec('source', `DROP TRIGGER slow_log ON ${log}`);
      await direct.run(() => direct.activities.releaseSource({ migrationId: 'keepalive', source: 'src', freeze: 'remove' }));
    }
    expect(ended).toEqual({ ended: 'cancelled', error: expect.anything() });
  }, 150_000);

  it('queues the key of a row whose key is stored out of line when only another column changed', async () => {
    await dbs.exec('source', `CREATE TABLE public.docs (k text PRIMARY KEY, v int NOT NULL);
      ALTER TABLE public.docs ALTER COLUMN k SET STORAGE EXTERNAL;
      INSERT INTO public.docs SELECT repeat(md5(g::text), 80), 0 FROM generate_series(1, 3) g;`);
    // Out of line: the row's key is in the TOAST table, not in the row.
    const [{ toast }] = await dbs.query<{ toast: string }>('source', `SELECT reltoastrelid::regclass::text AS toast FROM pg_class WHERE oid = 'public.docs'::regclass`);
    expect(await dbs.query('source', `SELECT count(DISTINCT chunk_id)::int AS n FROM ${toast}`)).toEqual([{ n: 3 }]);
    const plan = await captured('toasted', ['public.docs'], 'logical');
    const log = logOf('toasted');
    const stream = consumer('toasted', plan);
    let ended;
    try {
      await dbs.exec('source', `UPDATE public.docs SET v = v + 1 WHERE k = repeat(md5('2'), 80)`);
      const queued = await whileStreaming(stream, async () => {
        const rows = await dbs.query<{ k: string }>('source', `SELECT pk[1] AS k FROM ${log}`);
        return rows.length > 0 ? rows : undefined;
      }, 30_000);
      expect(queued.map((r) => r.k)).toEqual([`${'c81e728d9d4c2f636f067f89cc14862c'.repeat(80)}`]);
    } finally {
      ended = await stream.stop();
      await direct.run(() => direct.activities.releaseSource({ migrationId: 'toasted', source: 'src', freeze: 'remove' }));
    }
    expect(ended).toEqual({ ended: 'cancelled', error: expect.anything() });
  });

  it('is not chosen for a table whose key is a generated column, which pgoutput does not send: auto takes triggers, logical is refused', async () => {
    await dbs.exec('source', `CREATE TABLE public.derived (a int NOT NULL, k int GENERATED ALWAYS AS (a * 2) STORED PRIMARY KEY, v text)`);
    const auto = await preflight('generated-auto', ['public.derived']);
    expect(auto.capture).toEqual({ mode: 'trigger', reason: expect.stringMatching(/public\.derived: key column "k" is a generated column, which logical decoding does not send/) });
    await expect(preflight('generated-logical', ['public.derived'], { capture: 'logical' })).rejects.toMatchObject({
      type: 'LogicalCaptureUnavailable',
      message: expect.stringMatching(/key column "k" is a generated column.*capture: trigger/),
    });
  });

  it('does not take a slot that is still being created for a ready one: a retry waits for a consistent, unclaimed slot', async () => {
    await dbs.exec('source', 'CREATE TABLE public.slotted (id int PRIMARY KEY); CREATE TABLE public.busy (id int)');
    const plan = await preflight('slot-race', ['public.slotted'], { capture: 'logical' });
    // A transaction with an xid, open: creating the slot waits for it to end.
    const open = new Client({ connectionString: dbs.url('source') });
    await open.connect();
    const install = () => direct.run(() => direct.activities.installCapture({ migrationId: 'slot-race', source: 'src', tables: captureTables(plan), armFreeze: true, logical: true }));
    try {
      await open.query('BEGIN');
      await open.query('INSERT INTO public.busy VALUES (1)');
      // The first attempt (its worker presumed dead) is creating the slot, waiting on `open`.
      const first = install();
      first.catch(() => undefined);
      const creator = await eventually(async () => (await dbs.query<{ pid: number }>('source', `SELECT active_pid AS pid FROM pg_replication_slots WHERE slot_name LIKE 'ferry\\_slot\\_%' AND active_pid IS NOT NULL`))[0]?.pid, 20_000);
      // Its retry must not return before the slot is consistent.
      let retryDone = false;
      const retry = install().finally(() => {
        retryDone = true;
      });
      retry.catch(() => undefined);
      await eventually(async () => retryDone || (await dbs.query('source', `SELECT 1 FROM pg_stat_activity WHERE pid <> $1 AND query LIKE '%pg_create_logical_replication_slot%' AND state = 'active'`, [creator])).length > 0, 20_000);
      expect(retryDone).toBe(false);
      await open.query('COMMIT');
      await retry;
      const [slot] = await dbs.query<{ flushed: string | null; active: boolean }>('source', `SELECT confirmed_flush_lsn::text AS flushed, active FROM pg_replication_slots WHERE slot_name LIKE 'ferry\\_slot\\_%'`);
      expect(slot.flushed).not.toBeNull();
      expect(slot.active).toBe(false);
      // The first attempt's creation was ended (it would have failed its activity, retried).
      await expect(first).rejects.toThrow();
    } finally {
      await open.query('ROLLBACK').catch(() => undefined);
      await open.end();
      await direct.run(() => direct.activities.releaseSource({ migrationId: 'slot-race', source: 'src', freeze: 'remove' }));
    }
  });
});

describe("the cutover drain's capture check of a group", () => {
  it("finds, in set form, what each table's own check finds: a table left out of the publication, then every table once the slot is gone", async () => {
    await dbs.exec('source', 'CREATE TABLE public.pub_a (id int PRIMARY KEY); CREATE TABLE public.pub_b (id int PRIMARY KEY);');
    const plan = await captured('pubcheck', ['public.pub_a', 'public.pub_b'], 'logical');
    const tables = plan.tables.map(copyTableOf);
    const { slot, publication } = logicalNames('pubcheck');
    const db = new Client({ connectionString: dbs.url('source') });
    await db.connect();
    try {
      const inSetForm = async () => (await captureSuspects(db, 'pubcheck', tables)).map((t) => t.source.name).sort();
      const oneByOne = async () => {
        const failed: string[] = [];
        for (const table of tables) {
          const err = await assertCaptureIntact(db, { migrationId: 'pubcheck', table }).then(() => undefined, (e: unknown) => e as ApplicationFailure);
          if (err) failed.push(`${table.source.name}: ${err.type}`);
        }
        return failed;
      };
      expect(await inSetForm()).toEqual([]);
      expect(await oneByOne()).toEqual([]);
      await dbs.exec('source', `ALTER PUBLICATION ${publication} DROP TABLE public.pub_b`);
      expect(await inSetForm()).toEqual(['pub_b']);
      expect(await oneByOne()).toEqual(['pub_b: CaptureLost']);
      await dbs.exec('source', `SELECT pg_drop_replication_slot('${slot}')`);
      expect(await inSetForm()).toEqual(['pub_a', 'pub_b']);
      expect(await oneByOne()).toEqual(['pub_a: CaptureLost', 'pub_b: CaptureLost']);
    } finally {
      await db.end();
    }
  });
});

describe('a table a subscription writes', () => {
  it('is frozen row by row: the apply worker, which fires no statement trigger, cannot write while frozen or after the move', async () => {
    await dbs.exec('upstream', `CREATE TABLE public.feed (id int PRIMARY KEY, v text NOT NULL);
      INSERT INTO public.feed VALUES (1, 'one');
      CREATE PUBLICATION feed_pub FOR TABLE public.feed;`);
    await dbs.exec('upstream', `SELECT pg_create_logical_replication_slot('feed_sub', 'pgoutput')`);
    await dbs.exec(
      'source',
      `CREATE TABLE public.feed (id int PRIMARY KEY, v text NOT NULL);
       CREATE SUBSCRIPTION feed_sub CONNECTION 'host=127.0.0.1 port=${cluster.port} user=postgres dbname=${dbs.names.upstream}' PUBLICATION feed_pub WITH (create_slot = false, slot_name = 'feed_sub');`,
    );
    await eventually(async () => (await dbs.query('source', 'SELECT 1 FROM public.feed WHERE id = 1')).length === 1, 30_000);
    const plan = await preflight('subscribed', ['public.feed'], { capture: 'trigger' });
    expect(plan.tables[0].notes).toEqual(expect.arrayContaining([expect.stringMatching(/written by subscription feed_sub.*row by row/)]));
    await direct.run(() => direct.activities.installCapture({ migrationId: 'subscribed', source: 'src', tables: captureTables(plan), armFreeze: true }));
    const errors = async () => Number((await dbs.query<{ n: string }>('source', `SELECT apply_error_count AS n FROM pg_stat_subscription_stats WHERE subname = 'feed_sub'`))[0].n);
    const setFreeze = (state: 'frozen' | 'open' | 'moved') => direct.run(() => direct.activities.setFreeze({ migrationId: 'subscribed', source: 'src', state }));
    try {
      // Captured while open: the apply worker's insert reaches the change log.
      await dbs.exec('upstream', `INSERT INTO public.feed VALUES (2, 'two')`);
      await eventually(async () => (await dbs.query('source', `SELECT 1 FROM ${logOf('subscribed')} WHERE pk[1] = '2'`)).length === 1, 30_000);

      await setFreeze('frozen');
      const before = await errors();
      await dbs.exec('upstream', `INSERT INTO public.feed VALUES (3, 'three')`);
      await eventually(async () => (await errors()) > before, 30_000);
      expect(await dbs.query('source', 'SELECT id FROM public.feed ORDER BY id')).toEqual([{ id: 1 }, { id: 2 }]);

      // Open again (a rollback): the apply worker's retry goes through.
      await setFreeze('open');
      await eventually(async () => (await dbs.query('source', 'SELECT 1 FROM public.feed WHERE id = 3')).length === 1, 30_000);

      // Moved (the cutover's end, keep-frozen): a replicated update is refused too.
      await setFreeze('moved');
      const moved = await errors();
      await dbs.exec('upstream', `UPDATE public.feed SET v = 'changed' WHERE id = 1`);
      await eventually(async () => (await errors()) > moved, 30_000);
      expect(await dbs.query('source', 'SELECT v FROM public.feed WHERE id = 1')).toEqual([{ v: 'one' }]);
    } finally {
      await dbs.exec('source', 'ALTER SUBSCRIPTION feed_sub DISABLE');
      await setFreeze('open');
      await direct.run(() => direct.activities.releaseSource({ migrationId: 'subscribed', source: 'src', freeze: 'remove' }));
    }
    // Nothing of the freeze is left on the table.
    expect(await dbs.query('source', `SELECT tgname FROM pg_trigger WHERE tgrelid = 'public.feed'::regclass AND tgname LIKE 'ferry%'`)).toEqual([]);
  });
});

describe('legacy table inheritance', () => {
  beforeAll(async () => {
    await dbs.exec('source', `CREATE TABLE public.cities (id int PRIMARY KEY, name text NOT NULL, population int NOT NULL);
      CREATE TABLE public.capitals (state text NOT NULL, PRIMARY KEY (id)) INHERITS (public.cities);
      INSERT INTO public.cities VALUES (1, 'Lyon', 500000);
      INSERT INTO public.capitals VALUES (2, 'Paris', 2100000, 'FR');`);
  });

  it('refuses a parent of inheritance children, whose reads would copy its children\'s rows too', async () => {
    for (const mode of ['online', 'full']) {
      const spec = parseSpec({ id: `parent-${mode}`, source: 'src', target: 'dst', mode, tables: ['public.cities'] });
      await expect(direct.run(() => direct.activities.preflight({ migrationId: `parent-${mode}`, spec }))).rejects.toMatchObject({
        type: 'UnsupportedTable',
        message: expect.stringMatching(/public\.cities has inheritance children \(public\.capitals\)/),
      });
    }
  });

  it('captures and freezes an inheritance child against writes made through its parent', async () => {
    const plan = await captured('child', ['public.capitals'], 'trigger');
    expect(plan.tables[0].notes).toEqual(expect.arrayContaining([expect.stringMatching(/inherits from public\.cities.*row by row/)]));
    const setFreeze = (state: 'frozen' | 'open') => direct.run(() => direct.activities.setFreeze({ migrationId: 'child', source: 'src', state }));
    try {
      // Written through the parent: its row trigger on the child logs the key.
      await dbs.exec('source', `UPDATE public.cities SET population = population + 1 WHERE name = 'Paris'`);
      expect(await dbs.query('source', `SELECT pk[1] AS id FROM ${logOf('child')}`)).toEqual([{ id: '2' }]);

      await setFreeze('frozen');
      await expect(dbs.exec('source', `UPDATE public.cities SET population = 0`)).rejects.toThrow(/frozen: Ferry migration child/);
      await expect(dbs.exec('source', `DELETE FROM public.cities WHERE id = 2`)).rejects.toThrow(/frozen: Ferry migration child/);
      await expect(dbs.exec('source', `INSERT INTO public.capitals VALUES (3, 'Bern', 140000, 'CH')`)).rejects.toThrow(/frozen: Ferry migration child/);
      // The parent's own rows are not migrated: they stay writable.
      await dbs.exec('source', `UPDATE ONLY public.cities SET population = population + 1`);
      expect(await dbs.query('source', 'SELECT id, population FROM public.cities ORDER BY id')).toEqual([
        { id: 1, population: 500001 },
        { id: 2, population: 2100001 },
      ]);
    } finally {
      await setFreeze('open');
      await direct.run(() => direct.activities.releaseSource({ migrationId: 'child', source: 'src', freeze: 'remove' }));
    }
    expect(await dbs.query('source', `SELECT tgname FROM pg_trigger WHERE tgrelid = 'public.capitals'::regclass AND tgname LIKE 'ferry%'`)).toEqual([]);
  });
});
