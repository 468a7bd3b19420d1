/**
 * Online migrations whose cutover meets what the happy path never does, on a private cluster
 * (wal_level=logical, prepared transactions allowed, wal_sender_timeout 10 s): a logical consumer
 * that works longer than the WAL sender's timeout on one transaction, a consumer that dies while
 * the source is frozen, and a prepared transaction under `onBlocked: terminate`. Each ends as it
 * must, checked against the databases: equal rows and nothing repaired, or a rollback that came
 * at once and left the source writable.
 */
import { Client } from 'pg';
import { accounts, seedSql } from '../fixtures/seeds';
import { quoteQualified } from '../../src/core/identifiers';
import { captureNames } from '../../src/db/capture-sql';
import { rowsAsText } from '../helpers/databases';
import { startPrivateCluster } from '../helpers/private-cluster';
import { expectCleanRun, expectNothingRepaired } from '../helpers/repairs';
import { eventually, resultWithin, TEST_TIMINGS, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { dropSlotsBehindFerry } from '../helpers/logical-cluster';

const suite = stackSuite({
  name: 'cutover_edges',
  databases: { source: seedSql(accounts(20000)), target: '' },
  connections: { live: 'source', next: 'target' },
  server: () => startPrivateCluster({ wal_level: 'logical', max_replication_slots: '10', max_prepared_transactions: '4', wal_sender_timeout: '10000' }, 'ferry-cutover-edges-'),
  perTest: 'databases',
});

const spec = (capture: 'logical' | 'trigger', cutover: Record<string, unknown> = {}) => ({
  source: 'live',
  target: 'next',
  mode: 'online',
  capture,
  tables: ['public.accounts'],
  cutover: { approval: 'manual', approvalTimeout: '10m', ...cutover },
});

/** A session holding a write transaction open on public.accounts, begun now. */
async function openWriter(): Promise<Client> {
  const client = new Client({ connectionString: suite.dbs.url('source'), application_name: 'late-writer' });
  await client.connect();
  client.on('error', () => undefined);
  await client.query('BEGIN');
  await client.query(`INSERT INTO public.accounts VALUES (900001, 1, 'late')`);
  return client;
}

/** Nothing of logical capture left on the cluster. */
async function noSlotOrPublication(): Promise<void> {
  expect(await suite.dbs.query('source', 'SELECT slot_name FROM pg_replication_slots')).toEqual([]);
  expect(await suite.dbs.query('source', 'SELECT pubname FROM pg_publication')).toEqual([]);
}

it('completes when the logical consumer works longer than wal_sender_timeout on one transaction, every row equal and nothing repaired', async () => {
  const id = 'edges-keepalive';
  await suite.stack.ferry.start(spec('logical'), { id });
  await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
  // The consumer writes a transaction's keys 5,000 at a time, confirming only its commit: each
  // write taking 4 s, one transaction of 20,000 rows keeps it from any commit for 16 s.
  const log = quoteQualified(captureNames(id, 0).log);
  await suite.dbs.exec('source', `CREATE FUNCTION public.slow_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(4); RETURN NULL; END $$;
    CREATE TRIGGER slow_log AFTER INSERT ON ${log} FOR EACH STATEMENT EXECUTE FUNCTION public.slow_log();`);
  const [{ lsn }] = await suite.dbs.query<{ lsn: string }>('source', `UPDATE public.accounts SET balance = balance + 1 RETURNING pg_current_wal_lsn()::text AS lsn`);
  await eventually(async () => (await suite.dbs.query<{ past: boolean }>('source', 'SELECT confirmed_lsn >= $1::pg_lsn AS past FROM _ferry_capture.slots', [lsn]))[0]?.past, 90_000);
  await suite.dbs.exec('source', `DROP TRIGGER slow_log ON ${log}`);
  await suite.stack.ferry.approve(id);
  const result = await resultWithin(suite.stack.ferry, id, 90_000);
  expect(result.error).toBeNull();
  expect(result.state).toBe('SUCCEEDED');
  expect(await rowsAsText(suite.dbs, 'target', 'public.accounts', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.accounts', 'id'));
  expectNothingRepaired(result);
  await expectCleanRun(suite.stack.ferry, result);
  await noSlotOrPublication();
  // The tests' timings reached the table workflow's activities (its heartbeat timeout).
  const events = (await suite.stack.client.workflow.getHandle(`${id}/table-0`).fetchHistory()).events ?? [];
  const heartbeats = new Set(events.map((e) => e.activityTaskScheduledEventAttributes?.heartbeatTimeout).filter((t) => t).map((t) => Number(t!.seconds)));
  expect([...heartbeats]).toEqual([TEST_TIMINGS.heartbeatTimeoutMs! / 1000]);
}, 240_000);

it('rolls back at once when the logical consumer dies while the cutover waits for a writer, and the writer can still commit', async () => {
  const id = 'edges-dead-consumer';
  await suite.stack.ferry.start(spec('logical', { maxWait: '5m', onBlocked: 'rollback' }), { id });
  await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
  const writer = await openWriter();
  try {
    await suite.stack.ferry.approve(id);
    await eventually(async () => (await suite.stack.ferry.status(id)).events.some((e) => e.type === 'CutoverBlocked'), 60_000);
    // The slot goes behind Ferry's back: nothing the writer commits could be captured now.
    await dropSlotsBehindFerry(suite.dbs, 'source');
    // Within a minute, the writer still open and cutover.maxWait (5 minutes) far off.
    const result = await resultWithin(suite.stack.ferry, id, 60_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('CaptureLost');
    expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['RollbackStarted', 'RolledBack']));
    // The freeze is lifted: the writer's transaction commits.
    await writer.query('COMMIT');
  } finally {
    await writer.end();
  }
  expect(await suite.dbs.query('source', 'SELECT note FROM public.accounts WHERE id = 900001')).toEqual([{ note: 'late' }]);
  await suite.dbs.exec('source', `UPDATE public.accounts SET note = 'writable' WHERE id = 1`);
  await noSlotOrPublication();
}, 180_000);

it('rolls back under onBlocked: terminate when a prepared transaction blocks, saying so, instead of keeping the source frozen', async () => {
  const id = 'edges-prepared';
  await suite.stack.ferry.start(spec('trigger', { maxWait: '2s', onBlocked: 'terminate' }), { id });
  await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
  const writer = await openWriter();
  await writer.query(`PREPARE TRANSACTION 'edges-batch'`);
  await writer.end();
  try {
    await suite.stack.ferry.approve(id);
    const result = await resultWithin(suite.stack.ferry, id, 60_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('CutoverBlocked');
    expect(result.error?.message).toMatch(/cannot terminate pid 0 .*a prepared transaction has no session to end; rolled back/);
    const blocked = result.events.filter((e) => e.type === 'CutoverBlocked').pop();
    expect(blocked?.detail).toEqual(
      expect.objectContaining({ outcome: 'rollback: a prepared transaction cannot be terminated', blockers: [expect.objectContaining({ pid: 0, query: 'PREPARED TRANSACTION edges-batch' })] }),
    );
    // Writable again at once, with the prepared transaction still waiting for its owner.
    await suite.dbs.exec('source', `UPDATE public.accounts SET note = 'writable' WHERE id = 1`);
  } finally {
    await suite.dbs.exec('source', `ROLLBACK PREPARED 'edges-batch'`);
  }
}, 180_000);
