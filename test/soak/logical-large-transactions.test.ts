/**
 * Logical capture under the two loads that stalled it for good before its consumer answered the
 * WAL sender's keepalives, at the scale they were reproduced (a private wal_level=logical cluster,
 * wal_sender_timeout 10 s): one UPDATE of 2,500,000 rows of a migrated table, whose changes take
 * the consumer far longer than the timeout to queue before their commit arrives; and a 1 GB
 * transaction left open on another table, which holds the slot's restart position back, so that
 * every reconnect decodes that gigabyte again before anything reaches the consumer. Both end with
 * the migration SUCCEEDED, every row equal and nothing repaired.
 */
import { Client } from 'pg';
import { TestDatabases } from '../helpers/databases';
import { startPrivateCluster } from '../helpers/private-cluster';
import { expectCleanRun, expectNothingRepaired } from '../helpers/repairs';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const ROWS = 2_500_000;
/**
 * Rows of the open transaction, and the WAL they must hold behind the slot at least. 300 MB, as
 * first reported, decoded again within the 10 s on this project's machine (the old consumer
 * survived it); about 1.1 GB took 29 s, and the consumer without keepalive answers never got past.
 */
const OPEN_ROWS = Number(process.env.FERRY_SOAK_OPEN_ROWS || 7_000_000);
const OPEN_MB = Number(process.env.FERRY_SOAK_OPEN_MB || 900);

const suite = stackSuite({
  name: 'soak_logical_large',
  databases: {
    source: `CREATE TABLE public.ledger (id bigint PRIMARY KEY, n int NOT NULL);
      INSERT INTO public.ledger SELECT g, 0 FROM generate_series(1, ${ROWS}) g;
      CREATE TABLE public.bulk (id bigint, filler text);
      ANALYZE;`,
    target: '',
  },
  connections: { live: 'source', next: 'target' },
  server: () =>
    startPrivateCluster({ wal_level: 'logical', max_replication_slots: '10', wal_sender_timeout: '10000', shared_buffers: "'128MB'", max_wal_size: "'2GB'" }, 'ferry-soak-logical-'),
  perTest: 'databases',
  setUpTimeoutMs: 300_000,
});

const spec = { source: 'live', target: 'next', mode: 'online', capture: 'logical', tables: ['public.ledger'], cutover: { approval: 'manual', approvalTimeout: '30m' } };

/** Whether the consumer has confirmed a position at or past `lsn`. */
async function confirmedPast(dbs: TestDatabases, lsn: string): Promise<boolean> {
  const rows = await dbs.query<{ past: boolean }>('source', 'SELECT confirmed_lsn >= $1::pg_lsn AS past FROM _ferry_capture.slots', [lsn]);
  return rows[0]?.past === true;
}

async function approvedAndEqual(id: string): Promise<void> {
  await suite.stack.ferry.approve(id);
  const result = await resultWithin(suite.stack.ferry, id, 900_000);
  expect(result.error).toBeNull();
  expect(result.state).toBe('SUCCEEDED');
  const md5 = `SELECT count(*)::int AS n, md5(string_agg(id::text || ':' || n::text, ',' ORDER BY id)) AS sum FROM public.ledger`;
  expect(await suite.dbs.query('target', md5)).toEqual(await suite.dbs.query('source', md5));
  expectNothingRepaired(result);
  await expectCleanRun(suite.stack.ferry, result);
  expect(await suite.dbs.query('source', 'SELECT slot_name FROM pg_replication_slots')).toEqual([]);
}

it('captures one UPDATE of 2,500,000 rows under a 10 s wal_sender_timeout and completes with every row equal', async () => {
  const id = 'soak-large-update';
  await suite.stack.ferry.start(spec, { id });
  await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 600_000);
  const [{ lsn }] = await suite.dbs.query<{ lsn: string }>('source', 'WITH u AS (UPDATE public.ledger SET n = n + 1 RETURNING 1) SELECT pg_current_wal_lsn()::text AS lsn FROM (SELECT count(*) FROM u) c');
  await eventually(() => confirmedPast(suite.dbs, lsn), 600_000, 1_000);
  await approvedAndEqual(id);
}, 1_800_000);

it('keeps capturing while a 1 GB transaction stays open on another table, across a reconnect that must decode it again', async () => {
  const id = 'soak-open-transaction';
  await suite.stack.ferry.start(spec, { id });
  await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 600_000);
  const open = new Client({ connectionString: suite.dbs.url('source') });
  await open.connect();
  try {
    await open.query('BEGIN');
    await open.query(`INSERT INTO public.bulk SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, ${OPEN_ROWS}) g`);
    const [{ held }] = (await open.query(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), (SELECT restart_lsn FROM pg_replication_slots)) AS held`)).rows;
    console.log(`soak: the open transaction holds ${Math.round(Number(held) / 1024 / 1024)} MB of WAL behind the slot`);
    expect(Number(held)).toBeGreaterThan(OPEN_MB * 1024 * 1024);
    const terminated = Date.now();
    // The consumer's connection ends (a restart, a network blip): its next one starts decoding
    // at the slot's restart position, behind the open transaction's gigabyte.
    await suite.dbs.exec('source', 'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active_pid IS NOT NULL');
    await suite.dbs.exec('source', `UPDATE public.ledger SET n = n + 1 WHERE id <= 1000`);
    const [{ lsn }] = await suite.dbs.query<{ lsn: string }>('source', 'SELECT pg_current_wal_lsn()::text AS lsn');
    await eventually(() => confirmedPast(suite.dbs, lsn), 300_000, 1_000);
    console.log(`soak: the consumer confirmed past the reconnect ${((Date.now() - terminated) / 1000).toFixed(1)} s after it`);
  } finally {
    await open.query('ROLLBACK').catch(() => undefined);
    await open.end();
  }
  await approvedAndEqual(id);
}, 1_800_000);
