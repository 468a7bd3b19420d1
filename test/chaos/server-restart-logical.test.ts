/**
 * The Temporal server goes away while logical capture's consumer streams under live writers
 * (private cluster with wal_level=logical): a dev server persisting to a SQLite file on a fixed
 * port is stopped for a few seconds and started again on the same port and file. The consumer
 * runs on its worker throughout — it needs the source, not Temporal — and keeps confirming
 * positions while the server is down; after approval the migration completes with every table
 * equal row for row (SQL on both databases) and no slot or publication left.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../src/dev/dev-server';
import { sleep } from '../helpers/chaos';
import { rowsAsText, TestDatabases } from '../helpers/databases';
import { LogicalCluster, startLogicalCluster } from '../helpers/logical-cluster';
import { eventually, resultWithin, TestStack, waitForPhase } from '../helpers/stack';
import { startWriters } from '../helpers/writers';

const DOWN_MS = 6_000;

describe('a Temporal server restart while logical capture streams', () => {
  let cluster: LogicalCluster;
  let dbs: TestDatabases;
  let stack: TestStack;
  const dbFile = join(tmpdir(), `ferry-restart-logical-${randomBytes(4).toString('hex')}.db`);

  beforeAll(async () => {
    cluster = await startLogicalCluster();
    dbs = await TestDatabases.create('srvlogical', ['source', 'target'], cluster.url);
    await dbs.exec(
      'source',
      `CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12,2), note text);
       INSERT INTO public.accounts SELECT g, g / 10.0, 'seed ' || g FROM generate_series(1, 20000) g;
       CREATE TABLE public.items (a int, b text, v int NOT NULL, PRIMARY KEY (a, b));
       INSERT INTO public.items SELECT g % 40, 'k' || g, 0 FROM generate_series(1, 4000) g;
       ANALYZE;`,
    );
    stack = await TestStack.start({ connections: { live: dbs.url('source'), next: dbs.url('target') }, workers: 0, server: { port: await freePort(), dbFile } });
  });

  afterAll(async () => {
    await stack?.teardown();
    await dbs?.drop();
    await cluster?.stop();
    for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${dbFile}${suffix}`, { force: true });
  });

  it('loses nothing: the consumer keeps capturing through the outage and the migration completes', async () => {
    await Promise.all([stack.startWorkerProcessReady('w1'), stack.startWorkerProcessReady('w2')]);
    const { id } = await stack.ferry.start(
      { source: 'live', target: 'next', mode: 'online', capture: 'logical', cutover: { approval: 'manual', approvalTimeout: '10m' }, tables: ['public.accounts', 'public.items'] },
      { id: 'server-restart-logical' },
    );
    const writers = await startWriters(dbs.url('source'), 3);
    const confirmed = async () => (await dbs.query<{ lsn: string }>('source', 'SELECT confirmed_lsn::text AS lsn FROM _ferry_capture.slots'))[0].lsn;
    const past = async (a: string, b: string) => (await dbs.query<{ p: boolean }>('source', 'SELECT $1::pg_lsn > $2::pg_lsn AS p', [a, b]))[0].p;
    let result;
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      await stack.stopServer();
      const down = await confirmed();
      // Temporal is gone; the consumer still confirms what the writers commit.
      await eventually(async () => past(await confirmed(), down), DOWN_MS, 100);
      await sleep(DOWN_MS);
      await stack.startServer();
      const back = await confirmed();
      await eventually(async () => past(await confirmed(), back), 60_000);
      await eventually(async () => (await stack.ferry.status(id)).phase === 'AWAITING_APPROVAL', 60_000);
      await stack.ferry.approve(id);
      result = await resultWithin(stack.ferry, id, 120_000);
    } finally {
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    for (const [table, key] of [
      ['public.accounts', 'id'],
      ['public.items', 'a, b'],
    ]) {
      expect(await rowsAsText(dbs, 'target', table, key)).toEqual(await rowsAsText(dbs, 'source', table, key));
    }
    expect(await dbs.query('source', 'SELECT slot_name FROM pg_replication_slots')).toEqual([]);
    expect(await dbs.query('source', 'SELECT pubname FROM pg_publication')).toEqual([]);
  }, 300_000);
});
