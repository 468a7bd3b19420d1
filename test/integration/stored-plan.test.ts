/**
 * A plan of more than a page of tables (PLAN_PAGE, 500) never travels whole through Temporal:
 * the migration's preflight stores it on the target, the workflow loads it a hundred tables at a time, and
 * prepareTarget, the foreign keys and the finish read it there (MigrationPlan.stored). Checked
 * against the databases: every table's rows, a foreign key and a serial sequence across the
 * pages; no activity of the parent's is given or returns the whole plan; `ferry start`'s preflight lists the first
 * page; a cancelled move with `onFailure: rollback` leaves the target as empty as it was.
 */
import { PLAN_LOAD_PAGE, PLAN_PAGE } from '../../src/core/plan';
import { TestDatabases } from '../helpers/databases';
import { directActivities } from '../helpers/direct-activities';
import { aroundActivities } from '../helpers/interceptors';
import { expectCleanRun, scheduledActivities } from '../helpers/repairs';
import { activityPayloads } from '../helpers/history';
import { eventually, resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const TABLES = PLAN_PAGE + 20;

// Tables t1 … tN of a few rows each; t1 references t2 (the first page) and tN references t3, so
// the foreign keys cross the pages; tN's id is a serial.
const SOURCE = `
  CREATE SCHEMA many;
  DO $$ BEGIN FOR i IN 1..${TABLES - 1} LOOP
    EXECUTE format('CREATE TABLE many.t%s (id bigint PRIMARY KEY, label text)', i);
    EXECUTE format('INSERT INTO many.t%s SELECT g, ''t%s row '' || g FROM generate_series(1, 3 + %s %% 5) g', i, i, i);
  END LOOP; END $$;
  ALTER TABLE many.t1 ADD CONSTRAINT t1_t2 FOREIGN KEY (id) REFERENCES many.t2 (id);
  CREATE TABLE many.t${TABLES} (id serial PRIMARY KEY, t3 bigint REFERENCES many.t3 (id), label text);
  INSERT INTO many.t${TABLES} (t3, label) SELECT 1 + g % 3, 'last ' || g FROM generate_series(1, 40) g;
  ANALYZE;`;

/** Per table: its rows' md5 in key order. */
async function tables(dbs: TestDatabases, role: string): Promise<Record<string, string>> {
  const rows = await dbs.query<{ t: string; d: string }>(
    role,
    `SELECT c.relname AS t,
            (xpath('/row/d/text()', query_to_xml(format('SELECT md5(coalesce(string_agg(x::text, '','' ORDER BY id), '''')) AS d FROM many.%I x', c.relname), false, false, '')))[1]::text AS d
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'many' AND c.relkind = 'r' ORDER BY 1`,
  );
  return Object.fromEntries(rows.map((r) => [r.t, r.d]));
}

/** Relations and schemas of the target that are not the system's (an empty database has none). */
async function targetCatalog(dbs: TestDatabases): Promise<string[]> {
  const rows = await dbs.query<{ name: string }>(
    'target',
    `SELECT n.nspname || '.' || c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
     UNION ALL SELECT nspname FROM pg_namespace WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'public') AND nspname NOT LIKE 'pg_toast%' AND nspname NOT LIKE 'pg_temp%'
     ORDER BY 1`,
  );
  return rows.map((r) => r.name);
}


describe(`a plan of ${TABLES} tables, stored on the target`, () => {
  /** Before each copySmallTables attempt. */
  let beforeGroup: (() => Promise<void>) | undefined;

  const suite = stackSuite({
    name: 'stored_plan',
    databases: { source: SOURCE, target: '' },
    connections: { src: 'source', dst: 'target' },
    perTest: 'databases',
    workerOptions: () => ({ interceptors: aroundActivities({ copySmallTables: { before: async () => beforeGroup?.() } }) }),
  });

  beforeEach(() => {
    beforeGroup = undefined;
  });

  const spec = { source: 'src', target: 'dst', tables: ['many.*'], validation: 'checksum' };
  const parentPayloads = (id: string) => activityPayloads(suite.stack.ferry.client, id);

  it('moves every table through a plan loaded page by page: rows, keys across pages and the sequence equal, no event carrying the plan', async () => {
    // The preflight `ferry start` runs lists the first page and counts the rest; the migration plans itself.
    const helperPlan = await suite.stack.ferry.preflight(spec, 'stored-plan-check');
    expect([helperPlan.tables.length, helperPlan.moreTables, helperPlan.stored]).toEqual([PLAN_PAGE, TABLES - PLAN_PAGE, undefined]);

    const { id } = await suite.stack.ferry.start(spec, { id: 'stored-plan' });
    const result = await resultWithin(suite.stack.ferry, id, 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(suite.stack.ferry, result);
    expect(result.tables).toHaveLength(TABLES);
    // 3 + i % 5 rows in each tI before the last, 40 in the last.
    expect(result.rowsCopied).toBe(Array.from({ length: TABLES - 1 }, (_, i) => 3 + ((i + 1) % 5)).reduce((a, b) => a + b, 40));

    const target = await tables(suite.dbs, 'target');
    expect(Object.keys(target)).toHaveLength(TABLES);
    expect(target).toEqual(await tables(suite.dbs, 'source'));
    // The foreign keys of the first page and of the last, validated; the serial's sequence past its rows.
    const keys = await suite.dbs.query<{ name: string; valid: boolean }>('target', `SELECT conname AS name, convalidated AS valid FROM pg_constraint WHERE contype = 'f' ORDER BY 1`);
    expect(keys).toEqual([
      { name: 't1_t2', valid: true },
      { name: `t${TABLES}_t3_fkey`, valid: true },
    ]);
    const [next] = await suite.dbs.query<{ id: number }>('target', `INSERT INTO many.t${TABLES} (t3, label) VALUES (1, 'new') RETURNING id`);
    expect(next.id).toBe(41);

    // The plan came in pages of PLAN_LOAD_PAGE: preflight returned it without its tables, and the
    // steps that take every table were given none, only where to read them.
    const pages = Math.ceil(TABLES / PLAN_LOAD_PAGE);
    const activities = await scheduledActivities(suite.stack.ferry.client, id);
    expect(activities.filter((a) => a === 'planTables')).toHaveLength(pages);
    const { inputs, results } = await parentPayloads(id);
    expect(results.preflight.map((plan) => [plan.tables.length, plan.stored])).toEqual([[0, { tables: TABLES }]]);
    expect(results.planTables.map((page) => page.length)).toEqual(Array.from({ length: pages }, (_, i) => Math.min(PLAN_LOAD_PAGE, TABLES - i * PLAN_LOAD_PAGE)));
    expect(inputs.prepareTarget.map((input) => [input.plan.tables.length, input.plan.stored])).toEqual([[0, { tables: TABLES }]]);
    for (const step of ['addForeignKeys', 'finishTarget']) expect(inputs[step].map((input) => [input.tables.length, input.storedFor])).toEqual([[0, id]]);
    // The bookkeeping, the stored plan with it, is gone from the target.
    expect(await suite.dbs.query('target', `SELECT to_regclass('_ferry.migrations') AS t`)).toEqual([{ t: null }]);
  });

  it('refuses to read a stored plan that is not there (rolled back, or another migration\'s id), whether or not the bookkeeping is', async () => {
    const direct = directActivities(suite.dbs);
    try {
      const read = () => direct.run(() => direct.activities.planTables({ migrationId: 'stored-plan-none', target: 'dst', from: 0, to: PLAN_LOAD_PAGE }));
      await expect(read()).rejects.toThrow('migration stored-plan-none has no plan stored on the target any more (rolled back or cleaned up)');
      await suite.dbs.exec('target', 'CREATE SCHEMA _ferry; CREATE TABLE _ferry.migrations (id text PRIMARY KEY, plan jsonb)');
      await expect(read()).rejects.toThrow('migration stored-plan-none has no plan stored on the target any more (rolled back or cleaned up)');
    } finally {
      await direct.close();
    }
  });

  it('rolls back a cancelled move: the target holds nothing it did not hold before, the stored plan gone too', async () => {
    const before = await targetCatalog(suite.dbs);
    let groups = 0;
    beforeGroup = async () => {
      groups += 1;
    };
    const { id } = await suite.stack.ferry.start({ ...spec, onFailure: 'rollback' }, { id: 'stored-plan-rollback' });
    // Cancelled once the tables are being copied: prepareTarget's batches are in, with the plan.
    await eventually(async () => groups > 0, 120_000);
    expect(await targetCatalog(suite.dbs)).toContain('many.t1');
    await suite.stack.ferry.cancel(id, 'test: rollback of a stored plan');
    const result = await resultWithin(suite.stack.ferry, id, 120_000);
    expect(result.state).toBe('CANCELLED');
    expect(await targetCatalog(suite.dbs)).toEqual(before);
  });
});
