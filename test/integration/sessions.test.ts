/**
 * Dedicated sessions (long COPY streams, fenced transactions, validation scans) are given back
 * reset and lent again, rather than opened for every activity: on a 2-core machine a session's
 * start cost the server about 40 ms of CPU, more than copying a small table. Checked against
 * PostgreSQL itself: backend pids, the settings a session shows, pg_stat_database's count of
 * sessions opened.
 */
import { ConnectionRegistry } from '../../src/db/connections';
import { TestDatabases } from '../helpers/databases';
import { eventually } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const pidOf = async (client: { query(sql: string): Promise<{ rows: { pid: number }[] }> }) => (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;

describe('a dedicated session', () => {
  let dbs: TestDatabases;
  let connections: ConnectionRegistry;

  beforeAll(async () => {
    dbs = await TestDatabases.create('sessions', ['db']);
    connections = new ConnectionRegistry({ env: { FERRY_CONN_DB: dbs.url('db') }, applicationName: 'ferry-session-test' });
  });

  afterAll(async () => {
    await connections?.close();
    await dbs?.drop();
  });

  const alive = async (pid: number) => (await dbs.query('db', 'SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).length > 0;

  it('is given back reset to the pinned settings and lent again', async () => {
    const first = await connections.session('db');
    const pid = await pidOf(first.client);
    await first.client.query('SET session_replication_role = replica');
    await first.client.query("SET DateStyle = 'German'");
    await first.client.query('CREATE TEMP TABLE scratch (x int)');
    await first.client.query("SELECT pg_advisory_lock(4242)");
    await first.release();

    const again = await connections.session('db');
    try {
      expect(await pidOf(again.client)).toBe(pid);
      const { rows } = await again.client.query(
        `SELECT current_setting('session_replication_role') AS role, current_setting('DateStyle') AS datestyle,
                current_setting('search_path') AS path, current_setting('row_security') AS rls,
                to_regclass('pg_temp.scratch') AS scratch,
                (SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS locks`,
      );
      expect(rows[0]).toEqual({ role: 'origin', datestyle: 'ISO, YMD', path: '', rls: 'off', scratch: null, locks: 0 });
    } finally {
      await again.release();
    }
  });

  it('ends instead when the work failed, or when it left a transaction open', async () => {
    const failed = await connections.session('db');
    const failedPid = await pidOf(failed.client);
    await failed.release(new Error('the work failed'));
    await eventually(async () => !(await alive(failedPid)), 10_000);

    const open = await connections.session('db');
    const openPid = await pidOf(open.client);
    expect(openPid).not.toBe(failedPid);
    await open.client.query('BEGIN');
    await open.client.query('SELECT 1');
    await open.release(); // DISCARD ALL cannot run in a transaction block: the session ends
    await eventually(async () => !(await alive(openPid)), 10_000);

    const next = await connections.session('db');
    expect([failedPid, openPid]).not.toContain(await pidOf(next.client));
    await next.release();
  });

  it('never makes a caller wait, and keeps sessions of other timeouts apart', async () => {
    const three = await Promise.all([connections.session('db'), connections.session('db'), connections.session('db')]);
    const pids = await Promise.all(three.map((s) => pidOf(s.client)));
    expect(new Set(pids).size).toBe(3);
    await Promise.all(three.map((s) => s.release()));

    const unbounded = await connections.session('db', { statementTimeoutMs: 0 });
    expect(pids).not.toContain(await pidOf(unbounded.client));
    expect((await unbounded.client.query("SELECT current_setting('statement_timeout') AS t")).rows[0].t).toBe('0');
    await unbounded.release();
    const ordinary = await connections.session('db');
    expect((await ordinary.client.query("SELECT current_setting('statement_timeout') AS t")).rows[0].t).toBe('10min');
    await ordinary.release();
  });

  it('is given back or ended by withSessions as the work returns or throws', async () => {
    const pid = await connections.withSessions(['db'], undefined, (c) => pidOf(c));
    expect(await connections.withSessions(['db'], undefined, (c) => pidOf(c))).toBe(pid);
    await expect(
      connections.withSessions(['db'], undefined, async (c) => {
        expect(await pidOf(c)).toBe(pid);
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    await eventually(async () => !(await alive(pid)), 10_000);
  });
});

const TABLES = 60;

describe('a migration of many small tables', () => {
  const suite = stackSuite({
    name: 'sessions-many',
    databases: {
      source: `DO $$ BEGIN FOR i IN 1..${TABLES} LOOP
                 EXECUTE format('CREATE TABLE public.s%s (id int PRIMARY KEY, v text)', i);
                 EXECUTE format('INSERT INTO public.s%s SELECT g, md5(g::text) FROM generate_series(1, 50) g', i);
               END LOOP; END $$; ANALYZE;`,
      target: '',
    },
  });

  /**
   * Sessions ever opened on the source database, once none of the worker's is open (their stats
   * are flushed as they end). Read from the target database: the reads open sessions too.
   */
  async function sessionsOpened(): Promise<number> {
    const source = suite.dbs.names.source;
    await eventually(
      async () => (await suite.dbs.query('target', "SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND application_name = 'ferry-worker'", [source])).length === 0,
      60_000,
    );
    const [{ n }] = await suite.dbs.query<{ n: number }>('target', 'SELECT sessions::int AS n FROM pg_stat_database WHERE datname = $1', [source]);
    return n;
  }

  it('opens far fewer sessions on the source than it copies and validates tables', async () => {
    const before = await sessionsOpened();
    const tables = Array.from({ length: TABLES }, (_, i) => `public.s${i + 1}`);
    const { id } = await suite.stack.ferry.start({ source: 'source', target: 'target', tables, validation: 'checksum' }, { id: 'sessions-many' });
    expect((await suite.stack.ferry.result(id)).state).toBe('SUCCEEDED');
    const opened = (await sessionsOpened()) - before;
    // Each table's copy and its validation each took a source session of their own before
    // (at least 2 × 60); now the sessions of the tables copying at once are lent on.
    expect(opened).toBeLessThan(TABLES / 2);
    const [{ n }] = await suite.dbs.query<{ n: number }>('target', `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'`);
    expect(n).toBe(TABLES);
    const [{ rows }] = await suite.dbs.query<{ rows: number }>('target', `SELECT (${tables.map((t) => `(SELECT count(*) FROM ${t})`).join(' + ')})::int AS rows`);
    expect(rows).toBe(TABLES * 50);
  });
});
