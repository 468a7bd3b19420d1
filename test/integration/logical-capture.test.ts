/**
 * Online migrations with capture: logical, on a private cluster with wal_level=logical: under
 * concurrent writers (inserts, updates, key changes, deletes, late commits) the target equals the
 * source row for row after the cutover, no row trigger ever captured, and the slot and the
 * publication are gone afterwards — after SUCCEEDED, CANCELLED, TIMED_OUT and FAILED alike, and after a
 * terminated run once `ferry cleanup` ran.
 */
import { Client } from 'pg';
import { objectInventory, rowsAsText, TestDatabases } from '../helpers/databases';
import { LogicalCluster, startLogicalCluster } from '../helpers/logical-cluster';
import { eventually, resultWithin, TestStack, waitForPhase } from '../helpers/stack';
import { startWriters } from '../helpers/writers';
import { createMetrics, FerryMetrics } from '../../src/telemetry';

const SCHEMA = `
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12,2), note text);
INSERT INTO public.accounts SELECT g, g / 10.0, 'seed ' || g FROM generate_series(1, 20000) g;
CREATE TABLE public.items (a int, b text, v int NOT NULL, PRIMARY KEY (a, b));
INSERT INTO public.items SELECT g % 40, 'k' || g, 0 FROM generate_series(1, 4000) g;
CREATE TABLE public.stamps (at timestamptz PRIMARY KEY, v int);
INSERT INTO public.stamps SELECT timestamptz '2026-01-01 00:00:00.123456+00' + g * interval '1 minute', g FROM generate_series(1, 500) g;
ANALYZE;`;

const TABLES: [string, string][] = [
  ['public.accounts', 'id'],
  ['public.items', 'a, b'],
  ['public.stamps', 'at'],
];

/** Ferry's logical capture objects left on the cluster (slots are per cluster, publications per database). */
async function leftovers(dbs: TestDatabases): Promise<{ slots: unknown[]; publications: unknown[] }> {
  return {
    slots: await dbs.query('source', 'SELECT slot_name FROM pg_replication_slots'),
    publications: await dbs.query('source', 'SELECT pubname FROM pg_publication'),
  };
}

describe('an online migration with logical capture', () => {
  let cluster: LogicalCluster;
  let dbs: TestDatabases;
  let stack: TestStack;
  let metrics: FerryMetrics;

  beforeAll(async () => {
    cluster = await startLogicalCluster();
  });

  afterAll(async () => {
    await cluster?.stop();
  });

  beforeEach(async () => {
    dbs = await TestDatabases.create('logical', ['source', 'target'], cluster.url);
    await dbs.exec('source', SCHEMA);
    stack = await TestStack.start({ connections: { live: dbs.url('source'), next: dbs.url('target') }, workers: 0 });
    metrics = createMetrics();
    await stack.startWorker({ metrics });
  });

  afterEach(async () => {
    await stack?.teardown();
    await dbs?.drop();
  });

  const spec = (extra: Record<string, unknown> = {}) => ({
    source: 'live',
    target: 'next',
    mode: 'online',
    capture: 'logical',
    batchRows: 2000,
    tables: [{ name: 'public.accounts', chunks: 3 }, 'public.items', 'public.stamps'],
    ...extra,
  });

  it('keeps up with live writers through a slot, cuts over with the target equal to the source, and leaves no slot or publication', async () => {
    const before = await objectInventory(dbs, 'source');
    const { id } = await stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m', afterwards: 'unfreeze' } }), { id: 'logical-live' });
    const writers = await startWriters(dbs.url('source'), 3);
    let result;
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
      // Capture is the slot: no row trigger of Ferry's on the tables, a slot and a publication instead.
      const triggers = await dbs.query<{ tgname: string }>('source', `SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'ferry\\_capture\\_%'`);
      expect(triggers).toEqual([]);
      expect(await leftovers(dbs)).toEqual({ slots: [{ slot_name: expect.stringMatching(/^ferry_slot_/) }], publications: [{ pubname: expect.stringMatching(/^ferry_pub_/) }] });
      // A change made now reaches the target through the stream, including a key whose text depends on settings.
      await dbs.exec('source', `INSERT INTO public.stamps VALUES ('2030-06-01 12:00:00.5+02', -1); UPDATE public.stamps SET v = v + 1000 WHERE v = 7; DELETE FROM public.stamps WHERE v = 9;`);
      await eventually(async () => (await rowsAsText(dbs, 'target', 'public.stamps', 'at')).join() === (await rowsAsText(dbs, 'source', 'public.stamps', 'at')).join(), 30_000);
      await stack.ferry.approve(id);
      result = await resultWithin(stack.ferry, id, 90_000);
    } finally {
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    expect(writers.stats.operations).toBeGreaterThan(100);
    expect(writers.stats.byKind['update key']).toBeGreaterThan(0);
    expect(writers.stats.byKind.delete).toBeGreaterThan(0);
    expect(writers.stats.frozenErrors.length).toBeGreaterThan(0);
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(dbs, 'target', table, key)).toEqual(await rowsAsText(dbs, 'source', table, key));
    }
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(dbs, 'source')).toEqual(before);
  });

  it('loses nothing when the consumer cannot queue its keys for a while: it fails, and its retry resumes from the slot', async () => {
    const { id } = await stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-blocked' });
    const writers = await startWriters(dbs.url('source'), 3);
    let result;
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
      const log = (await dbs.query<{ t: string }>('source', `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%\\_0'`))[0].t;
      // The consumer's next flush waits for this lock past its lock_timeout and fails.
      const hold = new Client({ connectionString: dbs.url('source') });
      await hold.connect();
      try {
        await hold.query('BEGIN');
        await hold.query(`LOCK TABLE ${log} IN ACCESS EXCLUSIVE MODE`);
        await eventually(async () => {
          const d = await stack.ferry.handle(id).describe();
          return (d.raw.pendingActivities ?? []).some((a) => a.activityType?.name === 'streamChanges' && (a.attempt ?? 1) > 1);
        }, 60_000);
      } finally {
        await hold.query('ROLLBACK').catch(() => undefined);
        await hold.end();
      }
      await dbs.exec('source', `INSERT INTO public.stamps VALUES ('2031-01-01 00:00:00+00', 42)`);
      await eventually(async () => (await dbs.query('target', `SELECT 1 FROM public.stamps WHERE v = 42`)).length === 1, 60_000);
      await stack.ferry.approve(id);
      result = await resultWithin(stack.ferry, id, 90_000);
    } finally {
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(dbs, 'target', table, key)).toEqual(await rowsAsText(dbs, 'source', table, key));
    }
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
  });

  it('cuts over only once the consumer has queued every change committed before the freeze', async () => {
    const { id } = await stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-behind' });
    const writers = await startWriters(dbs.url('source'), 3);
    let result;
    const hold = new Client({ connectionString: dbs.url('source') });
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
      // The consumer falls behind: its next flush waits for this row lock (under its lock_timeout),
      // so changes committed now reach the change logs only once the lock goes.
      await hold.connect();
      await hold.query('BEGIN');
      await hold.query('SELECT 1 FROM _ferry_capture.slots FOR UPDATE');
      await stack.ferry.approve(id);
      await eventually(async () => writers.stats.frozenErrors.length > 0, 30_000, 50);
      await new Promise((r) => setTimeout(r, 3_000));
      await hold.query('ROLLBACK');
      result = await resultWithin(stack.ferry, id, 90_000);
    } finally {
      await hold.end().catch(() => undefined);
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(dbs, 'target', table, key)).toEqual(await rowsAsText(dbs, 'source', table, key));
    }
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
  });

  it('drops slot and publication when cancelled while streaming', async () => {
    const before = await objectInventory(dbs, 'source');
    const { id } = await stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-cancel' });
    const writers = await startWriters(dbs.url('source'), 2);
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
      await eventually(async () => (await dbs.query('source', 'SELECT 1 FROM pg_replication_slots WHERE active')).length === 1, 30_000);
      await stack.ferry.cancel(id, 'test over');
      expect((await resultWithin(stack.ferry, id, 60_000)).state).toBe('CANCELLED');
    } finally {
      await writers.stop();
    }
    expect(writers.stats.otherErrors).toEqual([]);
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
    // A trigger whose table a writer held locked is dropped by the background cleanup.
    await eventually(async () => JSON.stringify(await objectInventory(dbs, 'source')) === JSON.stringify(before), 60_000);
  });

  it('refuses a second online migration of a table that logical capture already captures', async () => {
    const { id } = await stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-first' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
    const second = await stack.ferry.start(spec({ capture: 'trigger', tables: [{ name: 'public.items', target: 'public.items_again' }], cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-second' });
    const result = await resultWithin(stack.ferry, second.id, 60_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('AlreadyCaptured');
    expect(result.error?.message).toMatch(/public\.items is already captured by another online migration \(publication ferry_pub_[0-9a-f]{12}\)/);
    // The first goes on and still leaves nothing behind.
    await stack.ferry.cancel(id, 'test over');
    expect((await resultWithin(stack.ferry, id, 60_000)).state).toBe('CANCELLED');
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
  });

  it('drops slot and publication when its deadline passes (TIMED_OUT)', async () => {
    const before = await objectInventory(dbs, 'source');
    const { id } = await stack.ferry.start(spec({ deadline: '15s', cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-deadline' });
    await eventually(async () => (await dbs.query('source', 'SELECT 1 FROM pg_replication_slots WHERE active')).length === 1, 30_000);
    const result = await resultWithin(stack.ferry, id, 60_000);
    expect(result.state).toBe('TIMED_OUT');
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(dbs, 'source')).toEqual(before);
  });

  it('leaves its slot when terminated, and ferry cleanup drops it with everything else', async () => {
    const before = { source: await objectInventory(dbs, 'source'), target: await objectInventory(dbs, 'target') };
    const { id } = await stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-terminated' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
    // Terminated: no compensation runs; the slot would hold WAL for as long as it exists.
    await stack.client.workflow.getHandle(id).terminate('operator terminated it');
    expect((await leftovers(dbs)).slots).toHaveLength(1);
    const cleanup = await stack.runCli(['cleanup', id]);
    expect(cleanup.stderr).toBe('');
    expect(cleanup.code).toBe(0);
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(dbs, 'source')).toEqual(before.source);
    expect(await objectInventory(dbs, 'target')).toEqual(before.target);
  });

  it('fails when its slot is dropped behind its back, and rolls back leaving no slot or publication', async () => {
    const before = await objectInventory(dbs, 'source');
    const { id } = await stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-lost' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
    // No writes: the consumer's logical messages still move the slot, so it holds no WAL for long.
    const flushed = async () => (await dbs.query<{ lsn: string }>('source', 'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots'))[0].lsn;
    const idle = await flushed();
    await eventually(async () => (await dbs.query<{ past: boolean }>('source', 'SELECT $1::pg_lsn > $2::pg_lsn AS past', [await flushed(), idle]))[0].past, 30_000);
    // Its lag is in the status, from the consumer's heartbeat.
    const status = await eventually(async () => (await stack.ferry.status(id)).capture, 30_000);
    expect(status).toEqual({ mode: 'logical', confirmedLsn: expect.stringMatching(/^[0-9A-F]+\/[0-9A-F]+$/), slotLagBytes: expect.any(Number), slotLagSeconds: expect.any(Number), safeWalBytes: null });
    expect(status.slotLagSeconds).toBeLessThan(30);
    // And in the worker's Prometheus metrics.
    const gauge = await metrics.registry.getSingleMetricAsString('ferry_slot_lag_bytes');
    expect(gauge).toMatch(/^ferry_slot_lag_bytes\{migration="logical-lost"\} \d+$/m);
    expect(await metrics.registry.getSingleMetricAsString('ferry_slot_lag_seconds')).toMatch(/^ferry_slot_lag_seconds\{migration="logical-lost"\} [\d.]+$/m);
    // Someone drops the slot: changes from now on would never be captured.
    await dbs.exec('source', `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active_pid IS NOT NULL`);
    await eventually(async () => {
      await dbs.exec('source', `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots`);
      return (await dbs.query('source', 'SELECT 1 FROM pg_replication_slots')).length === 0;
    }, 10_000);
    const result = await resultWithin(stack.ferry, id, 90_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('CaptureLost');
    expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['RollbackStarted', 'RolledBack']));
    expect(await leftovers(dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(dbs, 'source')).toEqual(before);
  });
});
