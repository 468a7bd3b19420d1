/**
 * Online migrations with capture: logical, on a private cluster with wal_level=logical: under
 * concurrent writers (inserts, updates, key changes, deletes, late commits) the target equals the
 * source row for row after the cutover, no row trigger ever captured, and the slot and the
 * publication are gone afterwards — after SUCCEEDED, CANCELLED, TIMED_OUT and FAILED alike, and after a
 * terminated run once `ferry cleanup` ran.
 */
import { Client } from 'pg';
import { accounts, items, seedSql, stamps } from '../fixtures/seeds';
import { objectInventory, rowsAsText, TestDatabases } from '../helpers/databases';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { startWriters } from '../helpers/writers';
import { createMetrics, FerryMetrics } from '../../src/telemetry';
import { dropSlotsBehindFerry } from '../helpers/logical-cluster';

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
  let metrics: FerryMetrics;

  const suite = stackSuite({
    name: 'logical',
    databases: { source: seedSql(accounts(20000), items(), stamps(500)), target: '' },
    connections: { live: 'source', next: 'target' },
    logical: true,
    // Fresh databases for each case, one cluster and one Temporal server for all; the worker,
    // restarted for each case, feeds metrics of its own.
    perTest: 'databases',
    workerOptions: () => {
      metrics = createMetrics();
      return { metrics };
    },
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

  /** The change log of public.accounts (the spec's first table). */
  const accountsLog = async () =>
    (await suite.dbs.query<{ t: string }>('source', `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%\\_0'`))[0].t;

  /** A migration at its approval with its sync paused (the consumer keeps streaming): the change log keeps what the consumer writes. */
  async function pausedAtApproval(id: string): Promise<{ log: string; rows: number }> {
    await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    await suite.stack.ferry.pause(id);
    await eventually(async () => (await suite.stack.ferry.status(id)).paused);
    const log = await accountsLog();
    const [{ n }] = await suite.dbs.query<{ n: number }>('source', `SELECT count(*)::int AS n FROM ${log}`);
    return { log, rows: n };
  }

  /** Resumed, approved and cut over: SUCCEEDED, every table equal on both sides, nothing of the capture left. */
  async function resumedToTheEnd(id: string): Promise<void> {
    await suite.stack.ferry.resume(id);
    await suite.stack.ferry.approve(id);
    const result = await resultWithin(suite.stack.ferry, id, 90_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(suite.dbs, 'target', table, key)).toEqual(await rowsAsText(suite.dbs, 'source', table, key));
    }
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
  }

  it('keeps up with live writers through a slot, cuts over with the target equal to the source, and leaves no slot or publication', async () => {
    const before = await objectInventory(suite.dbs, 'source');
    const { id } = await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m', afterwards: 'unfreeze' } }), { id: 'logical-live' });
    const writers = await startWriters(suite.dbs.url('source'), 3);
    let result;
    try {
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      // Capture is the slot: no row trigger of Ferry's on the tables, a slot and a publication instead.
      const triggers = await suite.dbs.query<{ tgname: string }>('source', `SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'ferry\\_capture\\_%'`);
      expect(triggers).toEqual([]);
      expect(await leftovers(suite.dbs)).toEqual({ slots: [{ slot_name: expect.stringMatching(/^ferry_slot_/) }], publications: [{ pubname: expect.stringMatching(/^ferry_pub_/) }] });
      // A change made now reaches the target through the stream, including a key whose text depends on settings.
      await suite.dbs.exec('source', `INSERT INTO public.stamps VALUES ('2030-06-01 12:00:00.5+02', -1); UPDATE public.stamps SET v = v + 1000 WHERE v = 7; DELETE FROM public.stamps WHERE v = 9;`);
      await eventually(async () => (await rowsAsText(suite.dbs, 'target', 'public.stamps', 'at')).join() === (await rowsAsText(suite.dbs, 'source', 'public.stamps', 'at')).join(), 30_000);
      // Enough writes to be a real load on the stream before the cutover, however fast the phases before it ran.
      await eventually(async () => writers.stats.operations > 100, 30_000);
      await suite.stack.ferry.approve(id);
      result = await resultWithin(suite.stack.ferry, id, 90_000);
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
      expect(await rowsAsText(suite.dbs, 'target', table, key)).toEqual(await rowsAsText(suite.dbs, 'source', table, key));
    }
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before);
  });

  it('loses nothing when the consumer cannot queue its keys for a while: it fails, and its retry resumes from the slot', async () => {
    const { id } = await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-blocked' });
    const writers = await startWriters(suite.dbs.url('source'), 3);
    let result;
    try {
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      const log = await accountsLog();
      // The consumer's next flush waits for this lock past its lock_timeout and fails.
      const hold = new Client({ connectionString: suite.dbs.url('source') });
      await hold.connect();
      try {
        await hold.query('BEGIN');
        await hold.query(`LOCK TABLE ${log} IN ACCESS EXCLUSIVE MODE`);
        await eventually(async () => {
          const d = await suite.stack.ferry.handle(id).describe();
          return (d.raw.pendingActivities ?? []).some((a) => a.activityType?.name === 'streamChanges' && (a.attempt ?? 1) > 1);
        }, 60_000);
      } finally {
        await hold.query('ROLLBACK').catch(() => undefined);
        await hold.end();
      }
      await suite.dbs.exec('source', `INSERT INTO public.stamps VALUES ('2031-01-01 00:00:00+00', 42)`);
      await eventually(async () => (await suite.dbs.query('target', `SELECT 1 FROM public.stamps WHERE v = 42`)).length === 1, 60_000);
      await suite.stack.ferry.approve(id);
      result = await resultWithin(suite.stack.ferry, id, 90_000);
    } finally {
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(suite.dbs, 'target', table, key)).toEqual(await rowsAsText(suite.dbs, 'source', table, key));
    }
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
  });

  it('cuts over only once the consumer has queued every change committed before the freeze', async () => {
    const { id } = await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-behind' });
    const writers = await startWriters(suite.dbs.url('source'), 3);
    let result;
    const hold = new Client({ connectionString: suite.dbs.url('source') });
    try {
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      // The consumer falls behind: its next flush waits for this row lock (under its lock_timeout),
      // so changes committed now reach the change logs only once the lock goes.
      await hold.connect();
      await hold.query('BEGIN');
      await hold.query('SELECT 1 FROM _ferry_capture.slots FOR UPDATE');
      await suite.stack.ferry.approve(id);
      await eventually(async () => writers.stats.frozenErrors.length > 0, 30_000, 50);
      // The cutover is waiting for the consumer (its awaitCaptured runs) while the consumer is
      // held behind: only then is the hold let go.
      await eventually(async () => {
        const d = await suite.stack.ferry.handle(id).describe();
        return (d.raw.pendingActivities ?? []).some((a) => a.activityType?.name === 'awaitCaptured');
      }, 60_000, 100);
      await hold.query('ROLLBACK');
      result = await resultWithin(suite.stack.ferry, id, 90_000);
    } finally {
      await hold.end().catch(() => undefined);
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(suite.dbs, 'target', table, key)).toEqual(await rowsAsText(suite.dbs, 'source', table, key));
    }
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
  });

  it('queues the keys of one large transaction in parts while it streams, and the target still ends equal', async () => {
    const id = 'logical-large-transaction';
    const { log, rows } = await pausedAtApproval(id);
    // One transaction changing all 20,000 accounts: more keys than the consumer holds before it
    // writes them, so they reach the log in several writes (each its own transaction on the
    // source) rather than all at once when the commit arrives.
    await suite.dbs.exec('source', 'UPDATE public.accounts SET balance = balance + 1');
    const written = await eventually(async () => {
      const [row] = await suite.dbs.query<{ n: number; writes: number }>('source', `SELECT count(*)::int AS n, count(DISTINCT xmin::text)::int AS writes FROM ${log}`);
      return row.n - rows >= 20_000 ? row : undefined;
    }, 60_000);
    expect(written.writes).toBeGreaterThanOrEqual(4);
    await resumedToTheEnd(id);
  });

  it('loses nothing when the consumer fails between the parts of a large transaction: its retry receives the whole transaction again', async () => {
    const id = 'logical-large-transaction-fails';
    const { log, rows } = await pausedAtApproval(id);
    // The log's write after the transaction's first part fails, once (a sequence is not rolled
    // back): the first part is in the log, the transaction's position not confirmed.
    await suite.dbs.exec(
      'source',
      `CREATE SEQUENCE public.fail_once;
       CREATE FUNCTION public.fail_after_first_part() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF (SELECT count(*) FROM ${log}) > ${rows + 5_000} THEN
           IF nextval('public.fail_once') = 1 THEN RAISE EXCEPTION 'the log refuses a part, once'; END IF;
         END IF;
         RETURN NULL;
       END $$;
       CREATE TRIGGER fail_after_first_part AFTER INSERT ON ${log} FOR EACH STATEMENT EXECUTE FUNCTION public.fail_after_first_part();`,
    );
    await suite.dbs.exec('source', 'UPDATE public.accounts SET balance = balance + 1');
    // The consumer failed and was retried; the retry resumed before the transaction and wrote it whole.
    await eventually(async () => (await suite.dbs.query('source', `SELECT 1 FROM public.fail_once WHERE is_called`)).length === 1, 60_000);
    const [logged] = await eventually(async () => {
      const keys = await suite.dbs.query<{ keys: number }>('source', `SELECT count(DISTINCT pk)::int AS keys FROM ${log}`);
      return keys[0].keys >= 20_000 ? keys : undefined;
    }, 60_000);
    expect(logged.keys).toBe(20_000);
    await resumedToTheEnd(id);
  });

  it('drops slot and publication when cancelled while streaming', async () => {
    const before = await objectInventory(suite.dbs, 'source');
    const { id } = await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-cancel' });
    const writers = await startWriters(suite.dbs.url('source'), 2);
    try {
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      await eventually(async () => (await suite.dbs.query('source', 'SELECT 1 FROM pg_replication_slots WHERE active')).length === 1, 30_000);
      await suite.stack.ferry.cancel(id, 'test over');
      expect((await resultWithin(suite.stack.ferry, id, 60_000)).state).toBe('CANCELLED');
    } finally {
      await writers.stop();
    }
    expect(writers.stats.otherErrors).toEqual([]);
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
    // A trigger whose table a writer held locked is dropped by the background cleanup.
    await eventually(async () => JSON.stringify(await objectInventory(suite.dbs, 'source')) === JSON.stringify(before), 60_000);
  });

  it('refuses a second online migration of a table that logical capture already captures', async () => {
    const { id } = await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-first' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    const second = await suite.stack.ferry.start(spec({ capture: 'trigger', tables: [{ name: 'public.items', target: 'public.items_again' }], cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-second' });
    const result = await resultWithin(suite.stack.ferry, second.id, 60_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('AlreadyCaptured');
    expect(result.error?.message).toMatch(/public\.items is already captured by another online migration \(publication ferry_pub_[0-9a-f]{12}\)/);
    // The first goes on and still leaves nothing behind.
    await suite.stack.ferry.cancel(id, 'test over');
    expect((await resultWithin(suite.stack.ferry, id, 60_000)).state).toBe('CANCELLED');
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
  });

  it('drops slot and publication when its deadline passes (TIMED_OUT)', async () => {
    const before = await objectInventory(suite.dbs, 'source');
    const { id } = await suite.stack.ferry.start(spec({ deadline: '15s', cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-deadline' });
    await eventually(async () => (await suite.dbs.query('source', 'SELECT 1 FROM pg_replication_slots WHERE active')).length === 1, 30_000);
    const result = await resultWithin(suite.stack.ferry, id, 60_000);
    expect(result.state).toBe('TIMED_OUT');
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before);
  });

  it('leaves its slot when terminated, and ferry cleanup drops it with everything else', async () => {
    const before = { source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') };
    const { id } = await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-terminated' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    // Terminated: no compensation runs; the slot would hold WAL for as long as it exists.
    await suite.stack.client.workflow.getHandle(id).terminate('operator terminated it');
    expect((await leftovers(suite.dbs)).slots).toHaveLength(1);
    const cleanup = await suite.stack.runCli(['cleanup', id]);
    expect(cleanup.stderr).toBe('');
    expect(cleanup.code).toBe(0);
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before.source);
    expect(await objectInventory(suite.dbs, 'target')).toEqual(before.target);
  });

  it('fails when its slot is dropped behind its back, and rolls back leaving no slot or publication', async () => {
    const before = await objectInventory(suite.dbs, 'source');
    const { id } = await suite.stack.ferry.start(spec({ cutover: { approval: 'manual', approvalTimeout: '5m' } }), { id: 'logical-lost' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    // No writes: the consumer's logical messages still move the slot, so it holds no WAL for long.
    const flushed = async () => (await suite.dbs.query<{ lsn: string }>('source', 'SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots'))[0].lsn;
    const idle = await flushed();
    await eventually(async () => (await suite.dbs.query<{ past: boolean }>('source', 'SELECT $1::pg_lsn > $2::pg_lsn AS past', [await flushed(), idle]))[0].past, 30_000);
    // Its lag is in the status, from the consumer's heartbeat.
    const status = await eventually(async () => (await suite.stack.ferry.status(id)).capture, 30_000);
    expect(status).toEqual({ mode: 'logical', confirmedLsn: expect.stringMatching(/^[0-9A-F]+\/[0-9A-F]+$/), slotLagBytes: expect.any(Number), slotLagSeconds: expect.any(Number), safeWalBytes: null });
    expect(status.slotLagSeconds).toBeLessThan(30);
    // And in the worker's Prometheus metrics.
    const gauge = await metrics.registry.getSingleMetricAsString('ferry_slot_lag_bytes');
    expect(gauge).toMatch(/^ferry_slot_lag_bytes\{migration="logical-lost"\} \d+$/m);
    expect(await metrics.registry.getSingleMetricAsString('ferry_slot_lag_seconds')).toMatch(/^ferry_slot_lag_seconds\{migration="logical-lost"\} [\d.]+$/m);
    // Someone drops the slot: changes from now on would never be captured.
    await dropSlotsBehindFerry(suite.dbs, 'source');
    const result = await resultWithin(suite.stack.ferry, id, 90_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('CaptureLost');
    expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['RollbackStarted', 'RolledBack']));
    expect(await leftovers(suite.dbs)).toEqual({ slots: [], publications: [] });
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before);
  });
});
