/**
 * Hundreds of tables in one online migration: caught-up tables must not hold the pool's activity
 * slots while they wait (they would starve the tables still copying), and the migration's
 * history must stay far from Temporal's limit. Checked against the databases, table by table.
 */
import { Client } from 'pg';
import { FERRY_APPLICATION_NAME } from '../helpers/backends';
import { adminUrl, TestDatabases } from '../helpers/databases';
import { expectCleanRun } from '../helpers/repairs';
import { resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';


/** md5 over every row of every table, per table, in key order: what "equal" means here. */
async function digests(dbs: TestDatabases, role: string): Promise<Record<string, string>> {
  const rows = await dbs.query<{ t: string; d: string }>(
    role,
    `SELECT c.relname AS t, (xpath('/row/d/text()', query_to_xml(format('SELECT md5(coalesce(string_agg(x::text, '','' ORDER BY id), '''')) AS d FROM many.%I x', c.relname), false, false, '')))[1]::text AS d
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'many' AND c.relkind = 'r' ORDER BY 1`,
  );
  return Object.fromEntries(rows.map((r) => [r.t, r.d]));
}

/**
 * The most sessions the workers held on the suite's databases at once, sampled every 100 ms
 * until `stop` (other suites running beside this one have their own databases on the same
 * server, and its max_connections is shared with them too).
 */
function peakSessions(databases: string[]): { stop(): Promise<{ peak: number; limit: number }> } {
  const admin = new Client({ connectionString: adminUrl() });
  let running = true;
  let peak = 0;
  const loop = (async () => {
    await admin.connect();
    while (running) {
      const { rows } = await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity WHERE application_name = $1 AND datname = ANY ($2)', [
        FERRY_APPLICATION_NAME,
        databases,
      ]);
      peak = Math.max(peak, rows[0].n);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const { rows } = await admin.query<{ n: number }>("SELECT current_setting('max_connections')::int AS n");
    await admin.end();
    return rows[0].n;
  })();
  return {
    async stop() {
      running = false;
      return { peak, limit: await loop };
    },
  };
}

/**
 * The suite at `defaultTables` tables unless FERRY_MANY_TABLES says otherwise: 30 in `npm test`
 * (test/integration/many-tables.test.ts), 300 in the soak tier (about 2 minutes on two cores: each
 * table's handful of activities waits for a slot behind the idle tables' syncs).
 */
export function manyTablesSuite(defaultTables: number): void {
  const TABLES = Number(process.env.FERRY_MANY_TABLES || defaultTables);
  describe(`an online migration of ${TABLES} tables`, () => {
    const suite = stackSuite({
      name: 'many',
      databases: {
        source: `CREATE SCHEMA many;
         DO $$ BEGIN FOR i IN 1..${TABLES} LOOP
           EXECUTE format('CREATE TABLE many.t%s (id int PRIMARY KEY, v text)', i);
           EXECUTE format('INSERT INTO many.t%s SELECT g, md5(g::text) FROM generate_series(1, 40) g', i);
         END LOOP; END $$;
         ANALYZE;`,
        target: '',
      },
      connections: { src: 'source', dst: 'target' },
      workers: 2,
    });

    it('copies, syncs and cuts over every table, with writes to some of them throughout', async () => {
      const tables = Array.from({ length: TABLES }, (_, i) => `many.t${i + 1}`);
      const { id } = await suite.stack.ferry.start(
        { source: 'src', target: 'dst', mode: 'online', parallelism: { tables: 8, chunks: 1 }, tables, cutover: { approval: 'auto' } },
        { id: 'many-tables' },
      );
      // An application inserting, updating and deleting in a few tables while the rest copy and
      // wait, until the freeze stops it — and nothing else may.
      const writer = new Client({ connectionString: suite.dbs.url('source') });
      await writer.connect();
      let writing = true;
      const writes = { insert: 0, update: 0, delete: 0 };
      let stoppedBy: string | undefined;
      const writes$ = (async () => {
        for (let n = 0; writing; n += 1) {
          const table = `many.t${1 + (n % 10)}`;
          const kind = (['insert', 'update', 'delete'] as const)[n % 3];
          const sql =
            kind === 'insert'
              ? `INSERT INTO ${table} VALUES (${1000 + n}, 'new')`
              : kind === 'update'
                ? `UPDATE ${table} SET v = v || '+' WHERE id = ${1 + (n % 40)}`
                : `DELETE FROM ${table} WHERE id = ${1000 + n - 3}`;
          try {
            await writer.query(sql);
            writes[kind] += 1;
          } catch (err) {
            stoppedBy = (err as Error).message;
            break;
          }
        }
      })();
      const sessions = peakSessions(Object.values(suite.dbs.names));
      let result;
      try {
        result = await resultWithin(suite.stack.ferry, id, 1_140_000);
      } finally {
        writing = false;
        await writes$;
        await writer.end();
      }
      const { peak, limit } = await sessions.stop();
      console.log(`many tables: ${TABLES} tables, the workers' sessions peaked at ${peak} (max_connections ${limit})`);
      expect(result.state).toBe('SUCCEEDED');
      // Two workers of eight slots: well inside the server's connections (the cutover's drain,
      // four tables per activity and every group at once, once reached 98 of 100).
      expect(peak).toBeLessThan(limit * 0.8);
      expect(stoppedBy).toMatch(/is frozen: Ferry migration many-tables/);
      expect(writes.insert + writes.update + writes.delete).toBeGreaterThan(100);
      expect(Math.min(writes.insert, writes.update, writes.delete)).toBeGreaterThan(10);
      const [source, target] = await Promise.all([digests(suite.dbs, 'source'), digests(suite.dbs, 'target')]);
      expect(Object.keys(target)).toHaveLength(TABLES);
      expect(target).toEqual(source);
      const events = (await suite.stack.client.workflow.getHandle(id).fetchHistory()).events?.length ?? 0;
      expect(events).toBeLessThan(51_200 / 2);
      // Equal by copy and sync alone: validation repaired no table.
      await expectCleanRun(suite.stack.ferry, result);
    }, 1_200_000);
  });
}
