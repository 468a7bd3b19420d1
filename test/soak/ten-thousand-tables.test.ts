/**
 * Ten thousand small tables, a hundred tenants' schemas of a hundred tables each, every table
 * with a serial id, in one full-mode migration chosen by one pattern (the soak tier: a few
 * minutes). The plan is stored on the target and loaded in pages; the tables go in groups. Checked
 * against the databases: every table's rows, every sequence's position; and against Temporal's
 * limits: the parent's history (events and bytes) and its largest event.
 */
import { createHash } from 'node:crypto';
import { temporal } from '@temporalio/proto';
import { TestDatabases } from '../helpers/databases';
import { expectCleanRun, historyEvents } from '../helpers/repairs';
import { resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { startPrivateCluster } from '../helpers/private-cluster';

const TENANTS = 100;
const TABLES_EACH = 100;

/** The tenants' schemas and tables, a schema a transaction (thousands in one would outgrow the lock table). */
async function seed(dbs: TestDatabases): Promise<void> {
  for (let tenant = 1; tenant <= TENANTS; tenant += 1) {
    const schema = `tenant_${String(tenant).padStart(3, '0')}`;
    await dbs.exec(
      'source',
      `CREATE SCHEMA ${schema};
       DO $$ BEGIN FOR i IN 1..${TABLES_EACH} LOOP
         EXECUTE format('CREATE TABLE ${schema}.t%s (id serial PRIMARY KEY, label text)', i);
         EXECUTE format('INSERT INTO ${schema}.t%s (label) SELECT md5(g::text) FROM generate_series(1, 1 + (%s + ${tenant}) %% 6) g', i, i);
       END LOOP; END $$`,
    );
  }
  await dbs.exec('source', 'ANALYZE');
}

/** The tenants' schema names. */
const tenants = Array.from({ length: TENANTS }, (_, i) => `tenant_${String(i + 1).padStart(3, '0')}`);

/**
 * md5 of every table's rows in key order, and of every sequence's position, a tenant's schema a
 * statement (one statement over all of them would lock 10,000 tables at once: "out of shared memory").
 */
async function digest(dbs: TestDatabases, role: string): Promise<{ tables: number; rows: string; sequences: string }> {
  let tables = 0;
  const rows = createHash('md5');
  const sequences = createHash('md5');
  for (const schema of tenants) {
    const [row] = await dbs.query<{ tables: number; rows: string; sequences: string }>(
      role,
      `SELECT (SELECT count(*)::int FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r') AS tables,
              (SELECT string_agg(c.relname || ':' ||
                      (xpath('/row/d/text()', query_to_xml(format('SELECT md5(string_agg(x::text, '','' ORDER BY id)) AS d FROM %I.%I x', n.nspname, c.relname), false, false, '')))[1]::text,
                      ',' ORDER BY c.relname)
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r') AS rows,
              (SELECT string_agg(sequencename || ':' || coalesce(last_value::text, '-'), ',' ORDER BY sequencename) FROM pg_sequences WHERE schemaname = $1) AS sequences`,
      [schema],
    );
    tables += row.tables;
    rows.update(`${schema}|${row.rows ?? ''}\n`);
    sequences.update(`${schema}|${row.sequences ?? ''}\n`);
  }
  return { tables, rows: rows.digest('hex'), sequences: sequences.digest('hex') };
}

describe(`${TENANTS * TABLES_EACH} small tables, ${TENANTS} tenants' schemas, in one full-mode migration`, () => {
  const suite = stackSuite({
    name: 'ten_thousand',
    databases: { source: '', target: '' },
    connections: { src: 'source', dst: 'target' },
    // A server of its own: a worker moving 10,000 tables holds sessions that, beside the tier's
    // other suites on the shared server, took it past max_connections ("too many clients").
    server: () => startPrivateCluster({}, 'ferry-ten-thousand-'),
    seed,
    setUpTimeoutMs: 600_000,
  });

  it('moves every table and sequence, the plan stored on the target, within Temporal\'s limits', async () => {
    const spec = { source: 'src', target: 'dst', tables: ['tenant_*.*'], validation: 'checksum', parallelism: { tables: 4 } };
    const { id } = await suite.stack.ferry.start(spec, { id: 'ten-thousand' });
    const result = await resultWithin(suite.stack.ferry, id, 1_200_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(suite.stack.ferry, result);
    // Past 1,000 tables the result lists those that did not complete: none.
    expect([result.tables.length, result.tablesOmitted]).toEqual([0, { count: TENANTS * TABLES_EACH, byPhase: { COMPLETED: TENANTS * TABLES_EACH } }]);
    const target = await digest(suite.dbs, 'target');
    expect(target.tables).toBe(TENANTS * TABLES_EACH);
    expect(target).toEqual(await digest(suite.dbs, 'source'));

    // Temporal's limits: 50,000 events and 50 MB a history, 2 MB a payload.
    const handle = suite.stack.ferry.client.workflow.getHandle(id);
    const { raw } = await handle.describe();
    const events = await historyEvents(suite.stack.ferry.client, id);
    expect(events.filter((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)).toEqual([]);
    expect(Number(raw.workflowExecutionInfo?.historyLength)).toBeLessThan(2_000);
    expect(Number(raw.workflowExecutionInfo?.historySizeBytes)).toBeLessThan(20_000_000);
    expect(Math.max(...events.map((e) => temporal.api.history.v1.HistoryEvent.encode(e).finish().length))).toBeLessThan(500_000);
  });
});
