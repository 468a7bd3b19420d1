/**
 * 1,800 small tables in one full-mode migration (the soak tier: about a minute each case). They
 * go in groups, one activity of the parent's each: the parent's history stays a few hundred
 * events and no table workflow runs; every table arrives equal. A migration of as many that fails
 * is rolled back whole: dropping 1,800 tables (each with its key's index, another index and its
 * TOAST table) in one transaction outgrows the server's lock table (max_locks_per_transaction 64 ×
 * 100 connections here: "out of shared memory" at about 1,500), so the rollback drops them in
 * batches, each with its bookkeeping rows.
 */
import { TestDatabases } from '../helpers/databases';
import { expectCleanRun } from '../helpers/repairs';
import { resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const TABLES = 1800;

/** The tables, 250 a transaction (more in one would outgrow the lock table, as the rollback would). */
async function seed(dbs: TestDatabases): Promise<void> {
  await dbs.exec('source', 'CREATE SCHEMA crowd');
  for (let first = 1; first <= TABLES; first += 250) {
    await dbs.exec(
      'source',
      `DO $$ BEGIN FOR i IN ${first}..${Math.min(TABLES, first + 249)} LOOP
         EXECUTE format('CREATE TABLE crowd.t%s (id int PRIMARY KEY, account int NOT NULL, label text)', i);
         EXECUTE format('CREATE INDEX t%s_account ON crowd.t%s (account)', i, i);
         EXECUTE format('INSERT INTO crowd.t%s SELECT g, g %% 7, md5(g::text) FROM generate_series(1, 30) g', i);
       END LOOP; END $$`,
    );
  }
  await dbs.exec('source', 'ANALYZE');
}

/** md5 of every table's rows in key order, one per table (a table's digest is its name's, to compare whole sides). */
async function digest(dbs: TestDatabases, role: string): Promise<{ tables: number; md5: string }> {
  const [row] = await dbs.query<{ tables: number; md5: string }>(
    role,
    `SELECT count(*)::int AS tables, md5(string_agg(c.relname || ':' ||
            (xpath('/row/d/text()', query_to_xml(format('SELECT md5(string_agg(x::text, '','' ORDER BY id)) AS d FROM crowd.%I x', c.relname), false, false, '')))[1]::text, ',' ORDER BY c.relname)) AS md5
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'crowd' AND c.relkind = 'r'`,
  );
  return row;
}

describe(`${TABLES} small tables in one full-mode migration`, () => {
  const suite = stackSuite({
    name: 'thousands',
    databases: { source: '', target: '' },
    connections: { src: 'source', dst: 'target' },
    perTest: 'databases',
    seed,
  });

  const spec = { source: 'src', target: 'dst', tables: ['crowd.*'], validation: 'checksum', parallelism: { tables: 4 } };

  it('moves them in groups: every table equal, a few hundred events in the parent, no table workflow', async () => {
    const { id } = await suite.stack.ferry.start(spec, { id: 'thousands' });
    const result = await resultWithin(suite.stack.ferry, id, 600_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(suite.stack.ferry, result);
    expect(await digest(suite.dbs, 'target')).toEqual(await digest(suite.dbs, 'source'));
    const events = (await suite.stack.ferry.client.workflow.getHandle(id).fetchHistory()).events ?? [];
    expect(events.filter((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)).toEqual([]);
    expect(events.length).toBeLessThan(500);
  });

  it('rolls back a failed one whole, dropping its tables in batches the lock table can hold', async () => {
    // A row that a CHECK added NOT VALID lets stay on the source, and the target refuses: the
    // last group fails for good once the tables before it are in.
    await suite.dbs.exec('source', `INSERT INTO crowd.t999 VALUES (-1, 0, 'refused'); ALTER TABLE crowd.t999 ADD CONSTRAINT positive CHECK (id > 0) NOT VALID`);
    const { id } = await suite.stack.ferry.start(spec, { id: 'thousands-failed' });
    const result = await resultWithin(suite.stack.ferry, id, 600_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.message).toMatch(/copy crowd\.t999 chunk 0: PostgreSQL error 23514/);
    const left = await suite.dbs.query<{ n: number }>('target', `SELECT count(*)::int AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('crowd', '_ferry')`);
    expect(left).toEqual([{ n: 0 }]);
    expect(await suite.dbs.query('target', `SELECT nspname FROM pg_namespace WHERE nspname IN ('crowd', '_ferry')`)).toEqual([]);
  });
});
