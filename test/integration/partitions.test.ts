/**
 * Partitioned tables, checked against both databases: Ferry creates the partitioned target
 * (parent, partitions with their bounds, sub-partitions, the default partition, the parent's
 * indexes on every partition); online, writers that address partitions directly are captured,
 * refused by the freeze after the cutover (the freeze of an older Ferry too), and cannot
 * TRUNCATE, drop, alter, attach, detach or add a partition while the migration runs — what the
 * guard cannot refuse fails the migration; a rollback leaves both sides as they were.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { objectInventory, TestDatabases } from '../helpers/databases';
import { eventsSchema, startPartitionWriters } from '../helpers/partition-writers';
import { approveUnderWriters, expectStoppedByFreeze } from '../helpers/writers';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const ROWS = 20_000;

/** The partition tree of `table`: name, parent, level, bounds and key of every member. */
async function partitionTree(dbs: TestDatabases, role: string, table: string): Promise<string[]> {
  const rows = await dbs.query<{ d: string }>(
    role,
    `SELECT concat_ws(' | ', c.relname, coalesce(p.relname, '-'), t.level, pg_get_expr(c.relpartbound, c.oid), pg_get_partkeydef(c.oid)) AS d
       FROM pg_partition_tree($1::regclass) t JOIN pg_class c ON c.oid = t.relid LEFT JOIN pg_class p ON p.oid = t.parentrelid
      ORDER BY t.level, c.relname`,
    [table],
  );
  return rows.map((r) => r.d);
}

/** Every row read through the parent, prefixed with the partition that holds it. */
async function rowsByPartition(dbs: TestDatabases, role: string, table: string, orderBy: string): Promise<string[]> {
  const rows = await dbs.query<{ r: string }>(
    role,
    `SELECT (SELECT relname FROM pg_class WHERE oid = t.tableoid) || ': ' || t::text AS r FROM ${table} t ORDER BY ${orderBy}`,
  );
  return rows.map((r) => r.r);
}

/** The indexes of every member of the tree, by relation name and what they index. */
async function indexesByPartition(dbs: TestDatabases, role: string, table: string): Promise<string[]> {
  const rows = await dbs.query<{ d: string }>(
    role,
    `SELECT c.relname || ': ' || string_agg(x.def, ', ' ORDER BY x.def) AS d
       FROM pg_partition_tree($1::regclass) t JOIN pg_class c ON c.oid = t.relid JOIN pg_index i ON i.indrelid = t.relid,
            LATERAL (SELECT regexp_replace(pg_get_indexdef(i.indexrelid), '^.* USING ', '') AS def) x
      GROUP BY c.relname ORDER BY 1`,
    [table],
  );
  return rows.map((r) => r.d);
}

const ORDERS = `
CREATE TABLE public.orders (id bigint NOT NULL, region text NOT NULL, status text NOT NULL, amount numeric(10,2),
  PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE public.orders_eu PARTITION OF public.orders FOR VALUES IN ('de', 'fr');
CREATE TABLE public.orders_us PARTITION OF public.orders FOR VALUES IN ('us') PARTITION BY RANGE (id);
CREATE TABLE public.orders_us_low PARTITION OF public.orders_us FOR VALUES FROM (MINVALUE) TO (5000);
CREATE TABLE public.orders_us_high PARTITION OF public.orders_us FOR VALUES FROM (5000) TO (MAXVALUE);
CREATE TABLE public.orders_other PARTITION OF public.orders DEFAULT;
CREATE INDEX orders_status_idx ON public.orders (status);
INSERT INTO public.orders SELECT g, (ARRAY['de', 'fr', 'us', 'jp', 'br'])[1 + g % 5], (ARRAY['open', 'paid', 'sent'])[1 + g % 3], g / 7.0
  FROM generate_series(1, 12000) g;
ANALYZE public.orders;`;

/** DETACH … CONCURRENTLY needs a partitioned table without a default partition. */
const READINGS = `
CREATE TABLE public.readings (id bigint NOT NULL, day int NOT NULL, v int, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE public.readings_a PARTITION OF public.readings FOR VALUES FROM (0) TO (100);
CREATE TABLE public.readings_b PARTITION OF public.readings FOR VALUES FROM (100) TO (200);
INSERT INTO public.readings SELECT g, g % 200, g FROM generate_series(1, 4000) g;
ANALYZE public.readings;`;

describe('partitioned tables', () => {
  const pairs = ['online', 'ddl', 'unguarded', 'concurrent', 'rollback', 'legacy', 'full'];
  /** What a pair's source is seeded with, where it is not the events table. */
  const sources: Record<string, string> = { concurrent: READINGS, full: ORDERS };

  const suite = stackSuite({
    name: 'partitions',
    // Each database is known to the workers by its own name (online_src, online_dst, …).
    databases: Object.fromEntries(pairs.flatMap((p) => [[`${p}_src`, sources[p] ?? eventsSchema(ROWS)], [`${p}_dst`, '']])),
  });

  const online = (pair: string) => ({
    source: `${pair}_src`,
    target: `${pair}_dst`,
    mode: 'online',
    batchRows: 2000,
    tables: [{ name: 'public.events', chunks: 3 }],
    cutover: { approval: 'manual', approvalTimeout: '5m' },
  });

  it('migrates a range-partitioned table online while writers use the parent and the partitions, then freezes every partition', async () => {
    const { id } = await suite.stack.ferry.start(online('online'), { id: 'part-online' });
    const writers = await startPartitionWriters(suite.dbs.url('online_src'), 3, ROWS);
    // Every kind of write happens while capture is in place, the sync running.
    const result = await approveUnderWriters(suite.stack.ferry, id, writers, 9, 120_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expectStoppedByFreeze(writers.stats);
    expect(writers.stats.frozenErrors[0]).toContain('Ferry migration part-online');

    // After the cutover the freeze holds on every partition, not only on the parent.
    const src = 'online_src';
    await expect(suite.dbs.exec(src, `INSERT INTO public.events_p1 (id, day) VALUES (99000001, 150)`)).rejects.toThrow(/events_p1 is frozen: Ferry migration part-online/);
    await expect(suite.dbs.exec(src, `UPDATE public.events_default SET note = 'late' WHERE id = 399`)).rejects.toThrow(/events_default is frozen: Ferry migration part-online/);
    await expect(suite.dbs.exec(src, `DELETE FROM public.events_p0 WHERE id = 1`)).rejects.toThrow(/events_p0 is frozen: Ferry migration part-online/);
    await expect(suite.dbs.exec(src, `TRUNCATE public.events_p2`)).rejects.toThrow(/events_p2 is frozen: Ferry migration part-online/);
    await expect(suite.dbs.exec(src, `INSERT INTO public.events (id, day) VALUES (99000002, 50)`)).rejects.toThrow(/frozen: Ferry migration part-online/);

    // The target: the same partitions, every row in the same one as on the source.
    expect(await partitionTree(suite.dbs, 'online_dst', 'public.events')).toEqual(await partitionTree(suite.dbs, src, 'public.events'));
    expect(await rowsByPartition(suite.dbs, 'online_dst', 'public.events', 'id, day')).toEqual(await rowsByPartition(suite.dbs, src, 'public.events', 'id, day'));
    expect(await indexesByPartition(suite.dbs, 'online_dst', 'public.events')).toEqual(await indexesByPartition(suite.dbs, src, 'public.events'));
  }, 300_000);

  it('refuses TRUNCATE, DROP and ALTER of a partition, ATTACH and DETACH PARTITION, and CREATE TABLE … PARTITION OF while it runs', async () => {
    const src = 'ddl_src';
    const tree = await partitionTree(suite.dbs, src, 'public.events');
    const { id } = await suite.stack.ferry.start(online('ddl'), { id: 'part-ddl' });
    await eventually(async () => (await suite.stack.ferry.status(id)).phase !== 'PENDING');
    const refused = /is refused: Ferry migration part-ddl/;
    await expect(suite.dbs.exec(src, 'TRUNCATE public.events_p1')).rejects.toThrow(/TRUNCATE of public\.events_p1 is refused: Ferry migration part-ddl/);
    await expect(suite.dbs.exec(src, 'DROP TABLE public.events_p0')).rejects.toThrow(refused);
    await expect(suite.dbs.exec(src, 'ALTER TABLE public.events_p2 DISABLE TRIGGER ALL')).rejects.toThrow(refused);
    await expect(suite.dbs.exec(src, 'ALTER TABLE public.events DETACH PARTITION public.events_p2')).rejects.toThrow(refused);
    await expect(suite.dbs.exec(src, 'CREATE TABLE public.events_p4 PARTITION OF public.events FOR VALUES FROM (1000) TO (1100)')).rejects.toThrow(
      /CREATE TABLE public\.events_p4 PARTITION OF public\.events is refused: Ferry migration part-ddl/,
    );
    await suite.dbs.exec(src, 'CREATE TABLE public.events_loose (LIKE public.events)');
    await expect(suite.dbs.exec(src, 'ALTER TABLE public.events ATTACH PARTITION public.events_loose FOR VALUES FROM (1000) TO (1100)')).rejects.toThrow(refused);
    // Nothing of it happened.
    expect(await partitionTree(suite.dbs, src, 'public.events')).toEqual(tree);
    expect(await suite.dbs.query(src, 'SELECT count(*)::int AS n FROM public.events')).toEqual([{ n: ROWS }]);
    await suite.stack.ferry.cancel(id, 'test over');
    expect((await resultWithin(suite.stack.ferry, id)).state).toBe('CANCELLED');
    // Once it is cancelled, the partitions are the application's again.
    await suite.dbs.exec(src, 'ALTER TABLE public.events ATTACH PARTITION public.events_loose FOR VALUES FROM (1000) TO (1100); TRUNCATE public.events_p1');
  });

  it('fails clearly when a partition is added behind a missing DDL guard', async () => {
    const { id } = await suite.stack.ferry.start(online('unguarded'), { id: 'part-unguarded' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    // Without superuser there is no event trigger; drop it to take that path, then add a partition.
    await suite.dbs.exec(
      'unguarded_src',
      `DO $$ DECLARE t text; BEGIN FOR t IN SELECT evtname FROM pg_event_trigger LOOP EXECUTE format('DROP EVENT TRIGGER %I', t); END LOOP; END $$;
       CREATE TABLE public.events_p4 PARTITION OF public.events FOR VALUES FROM (1000) TO (1100);`,
    );
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('FAILED');
    // (Seen once under load as CaptureLost: the whole error is shown should it recur.)
    expect(result.error).toMatchObject({
      type: 'SchemaChanged',
      message: expect.stringMatching(/the partitions of public\.events changed on the source during the online migration \(now: .*public\.events_p4 FOR VALUES FROM \(1000\) TO \(1100\)/),
    });
  });

  it('fails clearly when DETACH PARTITION … CONCURRENTLY gets past the guard half-way', async () => {
    const { id } = await suite.stack.ferry.start({ ...online('concurrent'), tables: ['public.readings'] }, { id: 'part-concurrent' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    // Its first transaction commits before the event trigger runs; the guard refuses the second.
    await expect(suite.dbs.exec('concurrent_src', 'ALTER TABLE public.readings DETACH PARTITION public.readings_b CONCURRENTLY')).rejects.toThrow(
      /ALTER TABLE of public\.readings is refused: Ferry migration part-concurrent/,
    );
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('SchemaChanged');
    expect(result.error?.message).toMatch(/the partitions of public\.readings changed on the source .*\(now: public\.readings_a FOR VALUES FROM \(0\) TO \(100\)\)/);
    // Rolled back: the detach can be finished.
    await suite.dbs.exec('concurrent_src', 'ALTER TABLE public.readings DETACH PARTITION public.readings_b FINALIZE');
  });

  it('rolls back on cancel, leaving the source exactly as it was and nothing Ferry created on the target', async () => {
    const before = { source: await objectInventory(suite.dbs, 'rollback_src'), target: await objectInventory(suite.dbs, 'rollback_dst') };
    const { id } = await suite.stack.ferry.start(online('rollback'), { id: 'part-rollback' });
    const writers = await startPartitionWriters(suite.dbs.url('rollback_src'), 2, ROWS);
    let result;
    try {
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      // The partitioned target was created and is being synced.
      expect((await partitionTree(suite.dbs, 'rollback_dst', 'public.events')).length).toBe(5);
      await suite.stack.ferry.cancel(id, 'changed our minds');
      result = await resultWithin(suite.stack.ferry, id);
    } finally {
      await writers.stop();
    }
    expect(result.state).toBe('CANCELLED');
    expect(writers.stats.otherErrors).toEqual([]);
    expect(writers.stats.frozenErrors).toEqual([]);
    // A trigger whose table a writer held at that moment goes in the background.
    // (If it never does, the comparison below shows what is left.)
    await eventually(async () => JSON.stringify(await objectInventory(suite.dbs, 'rollback_src')) === JSON.stringify(before.source), 60_000, 500).catch(() => undefined);
    expect(await objectInventory(suite.dbs, 'rollback_src')).toEqual(before.source);
    expect(await objectInventory(suite.dbs, 'rollback_dst')).toEqual(before.target);
    await suite.dbs.exec('rollback_src', `INSERT INTO public.events_p1 (id, day) VALUES (99000001, 150); TRUNCATE public.events_p2`);
  });

  it('freezes every partition with the freeze of an older Ferry too (freezeSource), and unfreezeSource lifts it from each', async () => {
    // Executions an older Ferry began still freeze at cutover with CREATE TRIGGER.
    const src = 'legacy_src';
    const before = await objectInventory(suite.dbs, src);
    const env = { FERRY_CONN_OLD: suite.dbs.url(src) };
    const connections = new ConnectionRegistry({ env });
    try {
      const activities = createActivities({ connections, logger: silentLogger(), env });
      const mock = new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') });
      const ref = { migrationId: 'part-legacy', source: 'old' };
      await mock.run(activities.freezeSource, { ...ref, tables: [{ index: 0, source: { schema: 'public', name: 'events' }, keyColumns: [] }] });
      await expect(suite.dbs.exec(src, `INSERT INTO public.events_p1 (id, day) VALUES (99000001, 150)`)).rejects.toThrow(/events_p1 is frozen: Ferry migration part-legacy/);
      await expect(suite.dbs.exec(src, `TRUNCATE public.events_default`)).rejects.toThrow(/events_default is frozen: Ferry migration part-legacy/);
      const { unfrozen, pending }: { unfrozen: string[]; pending: string[] } = await mock.run(activities.unfreezeSource, ref);
      expect(pending).toEqual([]);
      expect([...unfrozen].sort()).toEqual(['public.events', 'public.events_default', 'public.events_p0', 'public.events_p1', 'public.events_p2']);
    } finally {
      await connections.close();
    }
    expect(await objectInventory(suite.dbs, src)).toEqual(before);
    await suite.dbs.exec(src, `INSERT INTO public.events_p1 (id, day) VALUES (99000001, 150)`);
  });

  it('creates a list-partitioned target with its sub-partitions and default partition in full mode, every row in its partition', async () => {
    const { id } = await suite.stack.ferry.start({ source: 'full_src', target: 'full_dst', batchRows: 1000, tables: [{ name: 'public.orders', target: 'archive.orders', chunks: 2 }] }, { id: 'part-full' });
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    // The partitions live in the target table's schema, under their own names.
    expect(await partitionTree(suite.dbs, 'full_dst', 'archive.orders')).toEqual(await partitionTree(suite.dbs, 'full_src', 'public.orders'));
    expect(await partitionTree(suite.dbs, 'full_dst', 'archive.orders')).toEqual([
      'orders | - | 0 | LIST (region)',
      "orders_eu | orders | 1 | FOR VALUES IN ('de', 'fr')",
      'orders_other | orders | 1 | DEFAULT',
      "orders_us | orders | 1 | FOR VALUES IN ('us') | RANGE (id)",
      "orders_us_high | orders_us | 2 | FOR VALUES FROM ('5000') TO (MAXVALUE)",
      "orders_us_low | orders_us | 2 | FOR VALUES FROM (MINVALUE) TO ('5000')",
    ]);
    const leaves = await suite.dbs.query<{ n: string }>('full_dst', `SELECT n.nspname || '.' || c.relname AS n FROM pg_partition_tree('archive.orders') t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.isleaf ORDER BY 1`);
    expect(leaves.map((l) => l.n)).toEqual(['archive.orders_eu', 'archive.orders_other', 'archive.orders_us_high', 'archive.orders_us_low']);
    expect(await rowsByPartition(suite.dbs, 'full_dst', 'archive.orders', 'id, region')).toEqual(await rowsByPartition(suite.dbs, 'full_src', 'public.orders', 'id, region'));
    expect(await indexesByPartition(suite.dbs, 'full_dst', 'archive.orders')).toEqual(await indexesByPartition(suite.dbs, 'full_src', 'public.orders'));
    expect(await suite.dbs.query('full_dst', `SELECT nspname FROM pg_namespace WHERE nspname = '_ferry'`)).toEqual([]);
  });
});
