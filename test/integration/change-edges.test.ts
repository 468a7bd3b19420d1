/**
 * Change plans at their edges, each checked in the database: backfills whose expressions and
 * conditions name the key columns (the most ordinary backfill there is), a backfill batch that
 * meets a row another session holds (it must not hold the rows it has already locked while it
 * waits), and a rewrite of a table with outgoing foreign keys (the table that steps aside, and
 * after a revert the new one, must not keep them: they would refuse the application's deletes
 * of the rows they reference).
 */
import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { HeldLock } from '../helpers/kills';
import { eventually } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SEED = `
  CREATE TABLE public.codes (id bigint PRIMARY KEY, code text, flag boolean NOT NULL, hits int NOT NULL DEFAULT 0);
  INSERT INTO public.codes (id, flag) SELECT g, g % 3 = 0 FROM generate_series(1, 600) g;
  CREATE TABLE public.pairs (a int, b int, v text, PRIMARY KEY (a, b));
  INSERT INTO public.pairs (a, b) SELECT x, y FROM generate_series(1, 30) x, generate_series(1, 30) y;
  CREATE TABLE public.held (id int PRIMARY KEY, v int NOT NULL DEFAULT 0, n int NOT NULL DEFAULT 0);
  INSERT INTO public.held (id) SELECT g FROM generate_series(1, 400) g;
  CREATE TABLE public.customers (id int PRIMARY KEY, name text);
  INSERT INTO public.customers SELECT g, 'c' || g FROM generate_series(1, 20) g;
  CREATE TABLE public.orders (id int PRIMARY KEY, customer_id int NOT NULL REFERENCES public.customers (id), amount int NOT NULL);
  INSERT INTO public.orders SELECT g, 1 + g % 20, g FROM generate_series(1, 400) g;
  CREATE TABLE public.people (id int PRIMARY KEY, name text NOT NULL);
  INSERT INTO public.people SELECT g, 'person ' || g FROM generate_series(1, 200) g;
  ALTER TABLE public.people ADD CONSTRAINT people_name_short CHECK (length(name) < 4) NOT VALID;
  -- What ran on public.people, statement by statement, as DDL reached it.
  CREATE TABLE public.people_ddl (n serial PRIMARY KEY, query text);
  CREATE FUNCTION public.log_people_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF current_query() ILIKE '%people%' AND current_query() NOT ILIKE '%people_ddl%' THEN INSERT INTO public.people_ddl (query) VALUES (current_query()); END IF;
  END $$;
  CREATE EVENT TRIGGER log_people_ddl ON ddl_command_end EXECUTE FUNCTION public.log_people_ddl();
  ANALYZE;
`;

describe('change plans at their edges', () => {
  const suite = stackSuite({ name: 'change_edges', databases: { app: SEED } });

  it('backfills with expressions and conditions that name the key columns, each matching row once', async () => {
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'key-columns',
      database: 'app',
      steps: [
        { backfill: { table: 'public.codes', set: { code: "'B-' || id", hits: 'hits + 1' }, where: 'flag AND id % 2 = 0', batchRows: 100 } },
        { backfill: { table: 'public.pairs', set: { v: "a || ':' || b" }, where: 'b > a', batchRows: 100 } },
      ],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect({ state: result.state, error: result.error }).toEqual({ state: 'SUCCEEDED', error: null });
    const codes = await suite.dbs.query<{ id: string; code: string | null; hits: number; flag: boolean }>('app', 'SELECT id, code, hits, flag FROM public.codes ORDER BY id');
    const wrong = codes.filter((r) => {
      const match = r.flag && Number(r.id) % 2 === 0;
      return match ? r.code !== `B-${r.id}` || r.hits !== 1 : r.code !== null || r.hits !== 0;
    });
    expect(wrong).toEqual([]);
    const pairs = await suite.dbs.query<{ a: number; b: number; v: string | null }>('app', 'SELECT a, b, v FROM public.pairs ORDER BY a, b');
    expect(pairs.filter((r) => (r.b > r.a ? r.v !== `${r.a}:${r.b}` : r.v !== null))).toEqual([]);
    // 100 rows of codes match (multiples of 6 up to 600), 435 pairs have b > a; batches of 100.
    expect(result.rowsBackfilled).toBe(100 + 435);
  });

  it('does not hold the rows of a batch while it waits for a row another session holds', async () => {
    const url = suite.dbs.url('app');
    // Row 150 held FOR UPDATE by a session that stays open until the test releases it.
    const holder = await HeldLock.take(url, 'row 150', ['SELECT 1 FROM public.held WHERE id = 150 FOR UPDATE']);
    const app = new Client({ connectionString: url, application_name: 'ferry-test-app' });
    await app.connect();
    try {
      await app.query("SET lock_timeout = '10s'");
      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'held-row',
        database: 'app',
        steps: [{ backfill: { table: 'public.held', set: { v: '1', n: 'n + 1' }, batchRows: 400 } }],
      });
      // The batch is waiting for row 150 (it has locked rows before it, row 10 among them).
      const waiting = `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%held%' AND application_name NOT LIKE 'ferry-test%'`;
      await eventually(async () => (await suite.dbs.query('app', waiting)).length > 0, 60_000, 50);
      // The application's update of row 10 goes through within a couple of seconds.
      const started = Date.now();
      const error = await app.query('UPDATE public.held SET v = 2 WHERE id = 10').then(
        () => undefined,
        (err: Error) => err.message,
      );
      const waitedMs = Date.now() - started;
      expect({ error, waitedMs: waitedMs < 3_000 ? 'under 3 s' : waitedMs }).toEqual({ error: undefined, waitedMs: 'under 3 s' });
      await holder.release();
      const result = await suite.stack.ferry.changeResult(id);
      expect({ state: result.state, error: result.error }).toEqual({ state: 'SUCCEEDED', error: null });
      // Every row updated once by the backfill (n = 1), row 10 by the application first or after.
      const counts = await suite.dbs.query<{ n: number; rows: number }>('app', 'SELECT n, count(*)::int AS rows FROM public.held GROUP BY n ORDER BY n');
      expect(counts).toEqual([{ n: 1, rows: 400 }]);
    } finally {
      await holder.release();
      await app.end();
    }
  });

  it('names the step once, counted from 1, and says the lock wait ran out when it has (not that it tries again)', async () => {
    const holder = await HeldLock.take(suite.dbs.url('app'), 'customers', ['SELECT count(*) FROM public.customers']);
    try {
      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'lock-stays-busy',
        database: 'app',
        steps: [{ sql: 'COMMENT ON TABLE public.pairs IS NULL' }, { sql: 'ALTER TABLE public.customers ADD COLUMN note text', lockTimeout: '300ms', maxWait: '2s' }],
      });
      const result = await suite.stack.ferry.changeResult(id);
      expect(result.state).toBe('FAILED');
      expect(result.error?.type).toBe('LockWaitExceeded');
      expect(result.error?.message).toMatch(/^step 2 \(sql\): the lock stayed busy for \d+s over \d+ attempts \(maxWait 2s\)/);
      expect(result.error?.message).not.toMatch(/step 1|tries again/);
    } finally {
      await holder.release();
    }
  });

  it('rolls back a down: that sets NOT NULL in the safe form, never as one scan under ACCESS EXCLUSIVE', async () => {
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'down-not-null',
      database: 'app',
      onFailure: 'rollback',
      steps: [
        { sql: 'ALTER TABLE public.people ALTER COLUMN name DROP NOT NULL', down: 'ALTER TABLE public.people ALTER COLUMN name SET NOT NULL' },
        // Every name is longer than 3 characters: VALIDATE fails, and the plan rolls back.
        { validate: { table: 'public.people', constraint: 'people_name_short' } },
      ],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.state).toBe('FAILED');
    expect(result.steps.map((s) => s.state)).toEqual(['ROLLED_BACK', 'FAILED']);
    const [column] = await suite.dbs.query<{ not_null: boolean }>('app', `SELECT attnotnull AS not_null FROM pg_attribute WHERE attrelid = 'public.people'::regclass AND attname = 'name'`);
    expect(column.not_null).toBe(true);
    // The undo's statements: the helper CHECK added NOT VALID and validated, SET NOT NULL, the CHECK dropped.
    const ran = (await suite.dbs.query<{ query: string }>('app', 'SELECT query FROM public.people_ddl ORDER BY n')).map((r) => r.query.replace(/\s+/g, ' '));
    const undo = ran.slice(ran.findIndex((q) => /DROP NOT NULL/.test(q)) + 1);
    expect(undo.map((q) => (/CHECK \(.*IS NOT NULL\) NOT VALID/.test(q) ? 'check not valid' : /VALIDATE CONSTRAINT/.test(q) ? 'validate' : /SET NOT NULL/.test(q) ? 'set not null' : /DROP CONSTRAINT/.test(q) ? 'drop check' : q))).toEqual([
      'check not valid',
      'validate',
      'set not null',
      'drop check',
    ]);
    expect(await suite.dbs.query('app', `SELECT conname FROM pg_constraint WHERE conrelid = 'public.people'::regclass AND conname LIKE '%ferry%'`)).toEqual([]);
  });

  it('a rebuild that fails leaves no INVALID copy of the index, even one whose name PostgreSQL cut short', async () => {
    // 63 characters: the copy REINDEX CONCURRENTLY builds is named from a shortened prefix.
    const name = 'codes_code_index_with_a_name_long_enough_that_its_copy_is_cut_t';
    await suite.dbs.exec('app', `CREATE INDEX ${name} ON public.codes (code)`);
    // A snapshot older than the rebuild: REINDEX CONCURRENTLY waits for it, with its copy built and
    // INVALID, until the step's timeout ends it.
    const holder = await HeldLock.take(suite.dbs.url('app'), 'snapshot', ['SET TRANSACTION ISOLATION LEVEL REPEATABLE READ', 'SELECT count(*) FROM public.pairs']);
    try {
      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'rebuild-times-out',
        database: 'app',
        steps: [{ index: { table: 'public.codes', name, columns: ['code'], rebuild: true }, timeout: '3s' }],
      });
      const result = await suite.stack.ferry.changeResult(id);
      expect(result.state).toBe('FAILED');
    } finally {
      await holder.release();
    }
    const indexes = () =>
      suite.dbs.query<{ name: string; valid: boolean }>('app', `SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'public.codes'::regclass ORDER BY 1`);
    await eventually(async () => (await indexes()).every((i) => i.valid), 30_000, 200);
    expect(await indexes()).toEqual([
      { name, valid: true },
      { name: 'codes_pkey', valid: true },
    ]);
  });

  it('rewrites a table with an outgoing foreign key: the table that steps aside, and after a revert the new one, refuse no delete of a referenced row', async () => {
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'orders-bigint',
      database: 'app',
      steps: [{ rewrite: { table: 'public.orders', alter: ['ALTER COLUMN amount TYPE bigint'], approval: 'auto', keepOld: '10m' } }],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect({ state: result.state, error: result.error }).toEqual({ state: 'SUCCEEDED', error: null });
    const outgoing = () =>
      suite.dbs.query<{ table: string; valid: boolean }>(
        'app',
        `SELECT conrelid::regclass::text AS table, convalidated AS valid FROM pg_constraint WHERE contype = 'f' AND confrelid = 'public.customers'::regclass ORDER BY 1`,
      );
    // Only the table the application uses references customers, validated.
    expect(await outgoing()).toEqual([{ table: 'orders', valid: true }]);
    // The application deletes a customer's orders, then the customer.
    await suite.dbs.exec('app', 'DELETE FROM public.orders WHERE customer_id = 1; DELETE FROM public.customers WHERE id = 1');

    const out = await suite.stack.runCli(['revert', id, '--reason', 'bigint broke the reports']);
    expect({ code: out.code, stderr: out.stderr }).toEqual({ code: 0, stderr: '' });
    await eventually(async () => (await outgoing()).every((f) => f.table === 'orders' && f.valid), 60_000, 200);
    expect(await outgoing()).toEqual([{ table: 'orders', valid: true }]);
    await suite.dbs.exec('app', 'DELETE FROM public.orders WHERE customer_id = 2; DELETE FROM public.customers WHERE id = 2');
    // The old shape is back, and its foreign key still refuses an order of no customer.
    const [type] = await suite.dbs.query<{ type: string }>('app', `SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = 'public.orders'::regclass AND attname = 'amount'`);
    expect(type.type).toBe('integer');
    await expect(suite.dbs.exec('app', 'INSERT INTO public.orders VALUES (10000, 999, 1)')).rejects.toThrow(/violates foreign key constraint/);
  });
});

describe('a rewrite of an UNLOGGED table in a tablespace of its own', () => {
  // A tablespace is the cluster's: this case runs on a private one, its directory the server's to write.
  const location = mkdtempSync(join(tmpdir(), 'ferry-ts-'));
  if (process.getuid?.() === 0) {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres']).toString().trim());
    chownSync(location, id('-u'), id('-g'));
  }
  const suite = stackSuite({
    name: 'change_tablespace',
    logical: true,
    databases: { app: '' },
    seed: async (dbs) => {
      await dbs.exec('app', `CREATE TABLESPACE ferry_elsewhere LOCATION '${location}'`);
      await dbs.exec(
        'app',
        `CREATE UNLOGGED TABLE public.scratch (id int PRIMARY KEY USING INDEX TABLESPACE ferry_elsewhere, v int NOT NULL) TABLESPACE ferry_elsewhere;
         CREATE INDEX scratch_v_idx ON public.scratch (v) TABLESPACE ferry_elsewhere;
         CREATE INDEX scratch_v_default_idx ON public.scratch (v, id);
         INSERT INTO public.scratch SELECT g, g FROM generate_series(1, 1000) g;`,
      );
    },
    afterDrop: async () => rmSync(location, { recursive: true, force: true }),
  });

  it('keeps it UNLOGGED, the table and each index in its tablespace', async () => {
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'scratch-bigint',
      database: 'app',
      steps: [{ rewrite: { table: 'public.scratch', alter: ['ALTER COLUMN v TYPE bigint'], approval: 'auto', keepOld: '10m' } }],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect({ state: result.state, error: result.error }).toEqual({ state: 'SUCCEEDED', error: null });
    const placed = await suite.dbs.query<{ name: string; persistence: string; tablespace: string | null }>(
      'app',
      `SELECT c.relname AS name, c.relpersistence::text AS persistence, t.spcname AS tablespace
         FROM pg_class c LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace
        WHERE c.oid = 'public.scratch'::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'public.scratch'::regclass)
        ORDER BY 1`,
    );
    expect(placed).toEqual([
      { name: 'scratch', persistence: 'u', tablespace: 'ferry_elsewhere' },
      { name: 'scratch_pkey', persistence: 'u', tablespace: 'ferry_elsewhere' },
      { name: 'scratch_v_default_idx', persistence: 'u', tablespace: null },
      { name: 'scratch_v_idx', persistence: 'u', tablespace: 'ferry_elsewhere' },
    ]);
    const [type] = await suite.dbs.query<{ type: string }>('app', `SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = 'public.scratch'::regclass AND attname = 'v'`);
    expect(type.type).toBe('bigint');
  });
});
