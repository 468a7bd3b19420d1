/**
 * The target refuses every connection for 30 s (ALLOW_CONNECTIONS false and its sessions
 * terminated) while an online migration with capture: logical syncs under live writers, on a
 * private cluster with wal_level=logical. The consumer needs only the source: it keeps queueing
 * keys and confirming positions throughout, while the sync's slices fail and are retried. Once
 * the target is back the sync catches up, and after approval every table is equal row for row
 * (SQL on both databases) and no slot or publication is left.
 */
import { refuseConnections } from '../helpers/backends';
import { sleep } from '../helpers/chaos';
import { rowsAsText, TestDatabases } from '../helpers/databases';
import { LogicalCluster, startLogicalCluster } from '../helpers/logical-cluster';
import { eventually, resultWithin, TestStack, waitForPhase } from '../helpers/stack';
import { startWriters } from '../helpers/writers';

const OUTAGE_MS = 30_000;

describe('the target refusing connections while logical capture streams', () => {
  let cluster: LogicalCluster;
  let dbs: TestDatabases;
  let stack: TestStack;

  beforeAll(async () => {
    cluster = await startLogicalCluster();
    dbs = await TestDatabases.create('tgtlogical', ['source', 'target'], cluster.url);
    await dbs.exec(
      'source',
      `CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12,2), note text);
       INSERT INTO public.accounts SELECT g, g / 10.0, 'seed ' || g FROM generate_series(1, 20000) g;
       CREATE TABLE public.items (a int, b text, v int NOT NULL, PRIMARY KEY (a, b));
       INSERT INTO public.items SELECT g % 40, 'k' || g, 0 FROM generate_series(1, 4000) g;
       ANALYZE;`,
    );
    stack = await TestStack.start({ connections: { live: dbs.url('source'), next: dbs.url('target') } });
  });

  afterAll(async () => {
    await stack?.teardown();
    await dbs?.drop();
    await cluster?.stop();
  });

  it('loses nothing: the consumer captures through the outage and the sync catches up afterwards', async () => {
    const { id } = await stack.ferry.start(
      { source: 'live', target: 'next', mode: 'online', capture: 'logical', cutover: { approval: 'manual', approvalTimeout: '10m' }, tables: ['public.accounts', 'public.items'] },
      { id: 'target-outage-logical' },
    );
    const writers = await startWriters(dbs.url('source'), 3);
    const confirmed = async () => (await dbs.query<{ lsn: string }>('source', 'SELECT confirmed_lsn::text AS lsn FROM _ferry_capture.slots'))[0].lsn;
    const past = async (a: string, b: string) => (await dbs.query<{ p: boolean }>('source', 'SELECT $1::pg_lsn > $2::pg_lsn AS p', [a, b]))[0].p;
    let result;
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      const outage = await refuseConnections(dbs.names.target, cluster.url);
      const seen = new Set<string>();
      try {
        expect(outage.terminated).toBeGreaterThan(0);
        const atStart = await confirmed();
        const until = Date.now() + OUTAGE_MS;
        while (Date.now() < until) {
          for (const w of [id, `${id}/table-0`, `${id}/table-1`]) {
            const d = await stack.ferry.handle(w).describe().catch(() => undefined);
            for (const a of d?.raw.pendingActivities ?? []) if ((a.attempt ?? 1) > 1 && a.lastFailure?.message) seen.add(`${a.activityType?.name}: ${a.lastFailure.message}`);
          }
          await sleep(1000);
        }
        // The consumer went on while the target was gone.
        expect(await past(await confirmed(), atStart)).toBe(true);
      } finally {
        await outage.restore();
      }
      // The sync met the refusal itself, and the consumer never failed.
      expect([...seen].some((m) => m.startsWith('syncChanges') && /not currently accepting connections/.test(m))).toBe(true);
      expect([...seen].filter((m) => m.startsWith('streamChanges'))).toEqual([]);
      await eventually(async () => (await stack.ferry.status(id)).phase === 'AWAITING_APPROVAL', 60_000);
      await stack.ferry.approve(id);
      result = await resultWithin(stack.ferry, id, 180_000);
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
