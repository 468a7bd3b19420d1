/**
 * The cutover's wait for the write transactions begun before the freeze (awaitWriters), called
 * directly against real PostgreSQL, for the sessions pg_stat_activity describes only in part:
 * one that does not track its activity (no transaction start to compare with the freeze), and
 * one that holds a lock but is not in the activity view a query read (it began or ended while
 * the query ran). A writer missed here commits after the final drain and its rows never reach
 * the target; a session described with nulls once wedged a migration's status rendering.
 */
import { Client } from 'pg';
import { writersBegunBefore } from '../../activities/freeze';
import { TestDatabases } from '../helpers/databases';
import { PrivateCluster, startPrivateCluster } from '../helpers/private-cluster';
import { DirectActivities, directActivities } from '../helpers/direct-activities';

/** A session with a write transaction open on public.items, after `setup` ran in it. */
async function openWriter(url: string, setup = ''): Promise<{ client: Client; pid: number }> {
  const client = new Client({ connectionString: url, application_name: 'open-writer' });
  await client.connect();
  if (setup) await client.query(setup);
  const [{ pid }] = (await client.query('SELECT pg_backend_pid() AS pid')).rows;
  await client.query('BEGIN');
  await client.query('INSERT INTO public.items VALUES (DEFAULT)');
  return { client, pid: Number(pid) };
}

describe("the cutover's wait for writers begun before the freeze", () => {
  let dbs: TestDatabases;
  let direct: DirectActivities;
  const items = { schema: 'public', name: 'items' };

  beforeAll(async () => {
    dbs = await TestDatabases.create('await_writers', ['source', 'target']);
    await dbs.exec('source', 'CREATE TABLE public.items (id bigserial PRIMARY KEY)');
    direct = directActivities(dbs);
  });

  afterAll(async () => {
    await direct?.close();
    await dbs?.drop();
  });

  const sourceNow = async (): Promise<string> => (await dbs.query<{ at: string }>('source', "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS at"))[0].at;

  it('waits for a writer whose session has track_activities off, and names it', async () => {
    const writer = await openWriter(dbs.url('source'), 'SET track_activities = off');
    try {
      const frozenAt = await sourceNow();
      const waiting = await direct.run(() => direct.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables: [items], frozenAt, sliceMs: 300 }));
      expect(waiting.blockers).toEqual([expect.objectContaining({ pid: writer.pid, applicationName: 'open-writer', user: 'postgres' })]);
      for (const b of waiting.blockers) for (const [field, value] of Object.entries(b)) expect([field, value]).toEqual([field, expect.anything()]);

      await writer.client.query('COMMIT');
      const done = await direct.run(() => direct.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables: [items], frozenAt, sliceMs: 300 }));
      expect(done.blockers).toEqual([]);
    } finally {
      await writer.client.end();
    }
  });

  it('waits for a writer that wrote to a partition only, which locks the partition and not its parent', async () => {
    await dbs.exec('source', `CREATE TABLE public.events (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
      CREATE TABLE public.events_a PARTITION OF public.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`);
    const writer = await openWriter(dbs.url('source'));
    try {
      await writer.client.query(`INSERT INTO public.events_a VALUES (1, '2024-06-01')`);
      // Only items' lock is given up: the writer keeps its lock on the partition alone.
      await writer.client.query('COMMIT; BEGIN');
      await writer.client.query(`INSERT INTO public.events_a VALUES (2, '2024-06-02')`);
      const frozenAt = await sourceNow();
      const tables = [items, { schema: 'public', name: 'events' }, { schema: 'public', name: 'gone' }];
      const waiting = await direct.run(() => direct.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables, frozenAt, sliceMs: 300 }));
      expect(waiting.blockers.map((b) => b.pid)).toEqual([writer.pid]);
      await writer.client.query('COMMIT');
      const done = await direct.run(() => direct.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables, frozenAt, sliceMs: 300 }));
      expect(done.blockers).toEqual([]);
    } finally {
      await writer.client.end();
    }
  });

  it('counts no session missing from the activity view it read: such a session began after the freeze or has ended', async () => {
    const observer = new Client({ connectionString: dbs.url('source') });
    await observer.connect();
    let writer: { client: Client; pid: number } | undefined;
    try {
      const [{ relid }] = (await observer.query("SELECT 'public.items'::regclass::oid::int8 AS relid")).rows;
      const frozenAt = await sourceNow();
      // The view of pg_stat_activity is read once per transaction; pg_locks is read live.
      await observer.query('BEGIN');
      await observer.query('SELECT count(*) FROM pg_catalog.pg_stat_activity');
      writer = await openWriter(dbs.url('source'));
      const locks = await observer.query('SELECT 1 FROM pg_catalog.pg_locks WHERE pid = $1 AND relation = $2::oid', [writer.pid, relid]);
      expect(locks.rowCount).toBeGreaterThan(0);

      expect(await writersBegunBefore(observer, [Number(relid)], frozenAt)).toEqual([]);
      await observer.query('COMMIT');
      // Seen whole, the same session is no blocker either: its transaction began after the freeze.
      expect(await writersBegunBefore(observer, [Number(relid)], frozenAt)).toEqual([]);
    } finally {
      await writer?.client.end();
      await observer.end();
    }
  });

  it('waits for a writer whose savepoint failed: it can roll back to the savepoint and commit what it wrote before', async () => {
    const writer = await openWriter(dbs.url('source'));
    try {
      await writer.client.query('SAVEPOINT before_the_mistake');
      await expect(writer.client.query('SELECT 1 / 0')).rejects.toThrow(/division by zero/);
      const [{ state }] = await dbs.query<{ state: string }>('source', 'SELECT state FROM pg_stat_activity WHERE pid = $1', [writer.pid]);
      expect(state).toBe('idle in transaction (aborted)');
      const frozenAt = await sourceNow();
      const waiting = await direct.run(() => direct.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables: [items], frozenAt, sliceMs: 300 }));
      expect(waiting.blockers).toEqual([expect.objectContaining({ pid: writer.pid, applicationName: 'open-writer', state: 'idle in transaction (aborted)' })]);

      // What it can still do: its insert before the savepoint commits.
      await writer.client.query('ROLLBACK TO SAVEPOINT before_the_mistake');
      await writer.client.query('COMMIT');
      const done = await direct.run(() => direct.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables: [items], frozenAt, sliceMs: 300 }));
      expect(done.blockers).toEqual([]);
    } finally {
      await writer.client.end();
    }
  });

  it('ends a writer whose savepoint failed when asked to terminate', async () => {
    const writer = await openWriter(dbs.url('source'));
    const lost = new Promise((resolve) => writer.client.on('error', resolve));
    try {
      await writer.client.query('SAVEPOINT s');
      await expect(writer.client.query('SELECT 1 / 0')).rejects.toThrow(/division by zero/);
      const frozenAt = await sourceNow();
      const ended = await direct.run(() => direct.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables: [items], frozenAt, sliceMs: 300, terminate: true }));
      expect(ended.terminated).toEqual([writer.pid]);
      await lost;
      expect(await dbs.query('source', 'SELECT 1 FROM pg_stat_activity WHERE pid = $1', [writer.pid])).toEqual([]);
    } finally {
      await writer.client.end().catch(() => undefined);
    }
  });

  describe('on a server that allows prepared transactions (a private cluster)', () => {
    let cluster: PrivateCluster;
    let pdbs: TestDatabases;
    let pdirect: DirectActivities;

    beforeAll(async () => {
      cluster = await startPrivateCluster({ max_prepared_transactions: '4' }, 'ferry-prepared-');
      pdbs = await TestDatabases.create('await_prepared', ['source', 'target'], cluster.url);
      await pdbs.exec('source', 'CREATE TABLE public.items (id bigserial PRIMARY KEY)');
      pdirect = directActivities(pdbs);
    });

    // The cluster and its databases go with it, whatever a failed case left behind.
    afterAll(async () => {
      await pdirect?.close();
      await cluster?.stop();
    });

    it('waits for a prepared transaction that wrote before the freeze, though it has no session, until it is committed', async () => {
      const writer = await openWriter(pdbs.url('source'));
      await writer.client.query("PREPARE TRANSACTION 'nightly-batch-7'");
      await writer.client.end();
      const [{ at: frozenAt }] = await pdbs.query<{ at: string }>('source', "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS at");
      const waiting = await pdirect.run(() => pdirect.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables: [items], frozenAt, sliceMs: 300 }));
      expect(waiting.blockers).toEqual([expect.objectContaining({ pid: 0, user: 'postgres', query: 'PREPARED TRANSACTION nightly-batch-7', state: 'prepared' })]);
      expect(waiting.blockers[0].xactAgeSeconds).toBeGreaterThanOrEqual(0);

      await pdbs.exec('source', "COMMIT PREPARED 'nightly-batch-7'");
      const done = await pdirect.run(() => pdirect.activities.awaitWriters({ migrationId: 'm1', source: 'src', tables: [items], frozenAt, sliceMs: 300 }));
      expect(done.blockers).toEqual([]);
      expect(await pdbs.query('source', 'SELECT id FROM public.items')).toHaveLength(1);
    });
  });
});
