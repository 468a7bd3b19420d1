/**
 * `objects: all`: the chosen schemas' other objects — an extension, an enum and a domain, a
 * standalone sequence a default draws from, functions (one taking a moved table's row type, one
 * whose SQL-standard body reads a moved table),
 * a procedure and an aggregate, a view and a materialized view, a trigger and a rule, row-level
 * security and a policy, comments, grants and owners — made on the target from the source's own
 * pg_dump. Afterwards `pg_dump --schema-only` of the schema is the same on both sides (full mode,
 * and online mode once the source's freeze is lifted); the target's trigger did not fire on
 * Ferry's writes, the materialized view holds the source's rows, the standalone sequence is at the
 * source's position, nothing was repaired. A cancelled run leaves the target's catalog exactly as
 * it was (every object, owner, grant and comment). Roles the target lacks are refused before anything starts, each named.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { catalogSnapshot, ensureRoles, TestDatabases } from '../helpers/databases';
import { PrivateCluster, startPrivateCluster } from '../helpers/private-cluster';
import { expectCleanRun } from '../helpers/repairs';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const run = promisify(execFile);

const SHOP = `
  CREATE EXTENSION IF NOT EXISTS citext;
  CREATE SCHEMA shop;
  CREATE TYPE shop.status AS ENUM ('new', 'paid', 'shipped');
  CREATE DOMAIN shop.positive AS integer CHECK (VALUE > 0);
  CREATE SEQUENCE shop.order_no START 1000;
  CREATE FUNCTION shop.add_tax(numeric) RETURNS numeric LANGUAGE sql IMMUTABLE AS $f$ SELECT $1 * 1.2 $f$;
  CREATE TABLE shop.customer (id serial PRIMARY KEY, email citext NOT NULL UNIQUE, name text);
  CREATE TABLE shop.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer_id int REFERENCES shop.customer (id),
    status shop.status NOT NULL DEFAULT 'new', qty shop.positive, total numeric CHECK (total >= 0),
    no int DEFAULT nextval('shop.order_no'));
  CREATE INDEX orders_customer ON shop.orders (customer_id);
  CREATE TABLE shop.audit (id bigserial PRIMARY KEY, at timestamptz DEFAULT now(), what text);
  -- Not moved (exclude:), and partitioned: pg_dump 15's --exclude-table leaves its partitions in.
  CREATE TABLE shop.scratch (v int, at date, PRIMARY KEY (v, at)) PARTITION BY RANGE (at);
  CREATE TABLE shop.scratch_2025 PARTITION OF shop.scratch FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
  CREATE INDEX scratch_at ON shop.scratch (at);
  COMMENT ON TABLE shop.scratch_2025 IS 'not moved';
  CREATE FUNCTION shop.log_order() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN INSERT INTO shop.audit (what) VALUES (TG_OP); RETURN NEW; END $f$;
  CREATE TRIGGER orders_audit AFTER INSERT OR UPDATE ON shop.orders FOR EACH ROW EXECUTE FUNCTION shop.log_order();
  CREATE FUNCTION shop.order_count() RETURNS bigint LANGUAGE sql STABLE BEGIN ATOMIC SELECT count(*) FROM shop.orders; END;
  CREATE FUNCTION shop.order_value(o shop.orders) RETURNS numeric LANGUAGE sql STABLE AS $f$ SELECT shop.add_tax(o.total) $f$;
  CREATE VIEW shop.order_totals AS SELECT customer_id, sum(total) AS total FROM shop.orders GROUP BY customer_id;
  CREATE MATERIALIZED VIEW shop.big_orders AS SELECT id, total FROM shop.orders WHERE total > 100;
  CREATE UNIQUE INDEX big_orders_id ON shop.big_orders (id);
  CREATE RULE audit_keep AS ON DELETE TO shop.audit DO INSTEAD NOTHING;
  ALTER TABLE shop.customer ENABLE ROW LEVEL SECURITY;
  CREATE POLICY own_rows ON shop.customer FOR SELECT TO ferry_objects_reader USING (name = current_user);
  CREATE AGGREGATE shop.total_of(numeric) (SFUNC = numeric_add, STYPE = numeric);
  CREATE PROCEDURE shop.touch(n int) LANGUAGE sql AS $f$ UPDATE shop.orders SET qty = n WHERE false $f$;
  COMMENT ON TABLE shop.orders IS 'orders of the shop';
  COMMENT ON COLUMN shop.orders.total IS 'before tax';
  COMMENT ON FUNCTION shop.add_tax(numeric) IS 'adds the tax';
  COMMENT ON VIEW shop.order_totals IS 'per customer';
  GRANT USAGE ON SCHEMA shop TO ferry_objects_reader;
  GRANT SELECT ON shop.order_totals, shop.customer TO ferry_objects_reader;
  ALTER VIEW shop.order_totals OWNER TO ferry_objects_owner;
  ALTER TABLE shop.audit OWNER TO ferry_objects_owner;
  INSERT INTO shop.customer (email, name) SELECT 'c' || g || '@example.com', 'customer ' || g FROM generate_series(1, 200) g;
  INSERT INTO shop.orders (customer_id, total, qty) SELECT 1 + g % 200, (g % 300)::numeric, 1 + g % 5 FROM generate_series(1, 3000) g;
  SELECT nextval('shop.order_no') FROM generate_series(1, 17);
  REFRESH MATERIALIZED VIEW shop.big_orders;
  ANALYZE;`;

/** The tables left out of each move (exclude: shop.scratch), its partition included: the source's dump leaves them out to compare. */
const NOT_MOVED = ['shop.scratch', 'shop.scratch_2025'];

/** `pg_dump --schema-only` of a schema, less the random key of its psql `\restrict` lines. */
async function schemaDump(url: string, schema: string, exclude: string[] = []): Promise<string> {
  const args = ['--schema-only', `--schema=${schema}`, ...exclude.map((t) => `--exclude-table=${t}`), `--dbname=${url}`];
  const { stdout } = await run('pg_dump', args, { maxBuffer: 64 * 1024 * 1024 });
  return stdout.replace(/^\\(un)?restrict \S+$/gm, '\\restrict');
}

async function counts(dbs: TestDatabases, role: string) {
  const [row] = await dbs.query<Record<string, string>>(
    role,
    `SELECT (SELECT count(*) FROM shop.audit)::text AS audit, (SELECT count(*) FROM shop.big_orders)::text AS big_orders,
            (SELECT last_value || '/' || is_called FROM shop.order_no) AS order_no, (SELECT count(*) FROM shop.orders)::text AS orders`,
  );
  return row;
}

/** Seven hundred tables, each with a view over it: 1,400 relations for the second pass to create or lock. */
const MANY_VIEWS = `
  CREATE SCHEMA many;
  DO $$ BEGIN FOR i IN 1..700 LOOP
    EXECUTE format('CREATE TABLE many.t%s (id int PRIMARY KEY, v text)', i);
    EXECUTE format('INSERT INTO many.t%s VALUES (1, ''t%s'')', i, i);
    EXECUTE format('CREATE VIEW many.v%s AS SELECT id, upper(v) AS v FROM many.t%s', i, i);
  END LOOP; END $$;`;

describe('objects: all', () => {
  let ghost: PrivateCluster;
  /** A server with a small lock table: max_locks_per_transaction 16 × max_connections 20, 320 locks for every session. */
  let tiny: PrivateCluster;
  beforeAll(async () => {
    tiny = await startPrivateCluster({ max_connections: '20', max_locks_per_transaction: '16' }, 'ferry-tiny-');
    const tinyAdmin = new Client({ connectionString: tiny.url });
    await tinyAdmin.connect();
    await tinyAdmin.query('CREATE DATABASE tinysrc');
    await tinyAdmin.query('CREATE DATABASE tinydst');
    await tinyAdmin.end();
    // 300 tables, 20 to a transaction (the lock table would not take them all in one).
    const crowd = new Client({ connectionString: tiny.url.replace(/\/postgres$/, '/tinysrc') });
    await crowd.connect();
    await crowd.query('CREATE SCHEMA crowd');
    for (let i = 0; i < 300; i += 20) await crowd.query(`DO $$ BEGIN FOR i IN ${i + 1}..${i + 20} LOOP EXECUTE format('CREATE TABLE crowd.t%s (id int PRIMARY KEY)', i); END LOOP; END $$`);
    await crowd.end();
    // A source whose objects name a role that the target's server does not have.
    ghost = await startPrivateCluster();
    const admin = new Client({ connectionString: ghost.url });
    await admin.connect();
    await admin.query('CREATE DATABASE ghost');
    await admin.end();
    const db = new Client({ connectionString: ghost.url.replace(/\/postgres$/, '/ghost') });
    await db.connect();
    await db.query(`CREATE ROLE ferry_ghost_role; CREATE ROLE ferry_ghost_owner; CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY);
                    CREATE VIEW app.v AS SELECT id FROM app.t; GRANT SELECT ON app.v TO ferry_ghost_role; ALTER VIEW app.v OWNER TO ferry_ghost_owner;`);
    await db.end();
    // Global roles on the shared server: one owns some objects, one is granted some.
    await ensureRoles('ferry_objects_owner', 'ferry_objects_reader');
  }, 120_000);
  afterAll(async () => {
    await ghost?.stop();
    await tiny?.stop();
  });

  const suite = stackSuite({
    name: 'objects',
    databases: { source: SHOP, target: '', online_src: SHOP, online_dst: '', cancel_src: SHOP, cancel_dst: '', many_src: MANY_VIEWS },
    connections: { src: 'source', dst: 'target', online_src: 'online_src', online_dst: 'online_dst', cancel_src: 'cancel_src', cancel_dst: 'cancel_dst', many_src: 'many_src' },
    connectionUrls: () => ({
      ghost: ghost.url.replace(/\/postgres$/, '/ghost'),
      tinysrc: tiny.url.replace(/\/postgres$/, '/tinysrc'),
      tinydst: tiny.url.replace(/\/postgres$/, '/tinydst'),
    }),
  });

  it('plans the objects from pg_dump and refuses what cannot work, naming each', async () => {
    const { ferry } = suite.stack;
    const plan = await ferry.preflight({ source: 'src', target: 'dst', objects: 'all', tables: ['shop.*'], exclude: ['shop.scratch'] }, 'objects-plan');
    const objects = plan.objects!;
    expect(objects.schemas).toEqual(['shop']);
    expect(objects.extensions).toEqual(['citext']);
    // The excluded partitioned table and its partition (which the dump would otherwise keep).
    expect(objects.excludedTables).toEqual([
      { schema: 'shop', name: 'scratch' },
      { schema: 'shop', name: 'scratch_2025' },
    ]);
    expect(objects.sequences).toEqual([{ schema: 'shop', name: 'order_no' }]);
    expect(objects.kinds).toMatchObject({ EXTENSION: 1, TYPE: 1, DOMAIN: 1, FUNCTION: 4, PROCEDURE: 1, AGGREGATE: 1, VIEW: 1, 'MATERIALIZED VIEW': 1, TRIGGER: 1, RULE: 1, POLICY: 1, 'ROW SECURITY': 1 });
    // The table's own index (orders_customer) and constraints are Ferry's to build; the materialized view's is the dump's.
    expect(objects.kinds.INDEX).toBe(1);
    expect(objects.kinds.CONSTRAINT).toBeUndefined();
    await expect(ferry.preflight({ source: 'ghost', target: 'dst', objects: 'all', tables: ['app.*'] }, 'objects-ghost')).rejects.toThrow(
      "objects: all: the source's objects name roles the target does not have: ferry_ghost_owner, ferry_ghost_role;",
    );
    await expect(
      ferry.preflight({ source: 'src', target: 'dst', objects: 'all', tables: [{ name: 'shop.orders', target: 'shop.orders_v2' }, 'shop.customer'] }, 'objects-renamed'),
    ).rejects.toThrow('shop.orders → shop.orders_v2 would break them');
    // Workers without pg_dump (FERRY_PG_BIN naming a directory that has none; the in-process
    // worker reads the test's environment) refuse with the fix named.
    const dumpless = mkdtempSync(join(tmpdir(), 'ferry-no-pg-dump-'));
    process.env.FERRY_PG_BIN = dumpless;
    try {
      await expect(ferry.preflight({ source: 'src', target: 'dst', objects: 'all', tables: ['shop.*'] }, 'objects-no-dump')).rejects.toThrow(
        'install the PostgreSQL client tools on the workers (the worker image ships them) or point FERRY_PG_BIN at their directory',
      );
    } finally {
      delete process.env.FERRY_PG_BIN;
    }
    // The CLI prints what the plan brings, and refuses a missing role with exit 2, changing nothing.
    const dir = mkdtempSync(join(tmpdir(), 'ferry-objects-'));
    const spec = (name: string, text: string) => {
      writeFileSync(join(dir, name), text);
      return join(dir, name);
    };
    const shown = await suite.stack.runCli(['validate', spec('all.yaml', 'source: src\ntarget: dst\nobjects: all\ntables: ["shop.*"]\nexclude: [shop.scratch]\n'), '--connect']);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain('  objects: schemas shop, extensions citext; ');
    expect(shown.stdout).toContain('; left out (not moved): shop.scratch, shop.scratch_2025');
    const refused = await suite.stack.runCli(['start', spec('ghost.yaml', 'source: ghost\ntarget: dst\nobjects: all\ntables: all\n')]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('ferry_ghost_owner, ferry_ghost_role');
    expect(await suite.dbs.query('target', `SELECT nspname FROM pg_namespace WHERE nspname IN ('app', '_ferry')`)).toEqual([]);
  });

  it("refuses a dump of more tables than the source's lock table has room for, naming the setting to raise", async () => {
    await expect(suite.stack.ferry.preflight({ source: 'tinysrc', target: 'tinydst', objects: 'all', tables: ['crowd.*'] }, 'objects-locks')).rejects.toThrow(
      "objects: all reads the definitions with pg_dump, which locks each of the 300 tables it dumps in one transaction, and the source's lock table has room for 320 locks " +
        '(max_locks_per_transaction × (max_connections + max_prepared_transactions)) for every session: raise max_locks_per_transaction on the source to 64 or more',
    );
  });

  it("restores the second pass in several transactions where one would outgrow the target's lock table: 700 tables' views on a server with room for 320 locks", async () => {
    const { id } = await suite.stack.ferry.start({ source: 'many_src', target: 'tinydst', objects: 'all', tables: ['many.*'] }, { id: 'objects-many-views' });
    const result = await resultWithin(suite.stack.ferry, id, 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    const target = new Client({ connectionString: tiny.url.replace(/\/postgres$/, '/tinydst') });
    await target.connect();
    try {
      const views = await target.query(`SELECT count(*)::int AS n FROM pg_views WHERE schemaname = 'many'`);
      expect(views.rows[0].n).toBe(700);
      const sample = await target.query(`SELECT (SELECT v FROM many.v1) AS first, (SELECT v FROM many.v700) AS last`);
      expect(sample.rows[0]).toEqual({ first: 'T1', last: 'T700' });
    } finally {
      await target.end();
    }
    await expectCleanRun(suite.stack.ferry, result);
  }, 240_000);

  it('moves a schema whole in full mode: pg_dump of it is the same on both sides, and nothing was repaired', async () => {
    const { ferry } = suite.stack;
    await ferry.start({ source: 'src', target: 'dst', objects: 'all', tables: ['shop.*'], exclude: ['shop.scratch'] }, { id: 'objects-full' });
    const result = await resultWithin(ferry, 'objects-full', 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(ferry, result);
    expect(await schemaDump(suite.dbs.url('target'), 'shop')).toEqual(await schemaDump(suite.dbs.url('source'), 'shop', NOT_MOVED));
    // The trigger was there but did not fire on Ferry's writes (audit has the source's rows, no more),
    // the materialized view was refreshed, the sequence no column owns is at the source's position.
    expect(await counts(suite.dbs, 'target')).toEqual(await counts(suite.dbs, 'source'));
    expect(result.events.filter((e) => e.type === 'ObjectsRestored')).toHaveLength(1);
  }, 240_000);

  it('moves it in online mode too, and a cancelled run leaves the target as it was', async () => {
    const { ferry } = suite.stack;
    const before = await catalogSnapshot(suite.dbs, 'cancel_dst');
    await ferry.start(
      { source: 'cancel_src', target: 'cancel_dst', mode: 'online', objects: 'all', tables: ['shop.*'], exclude: ['shop.scratch'], cutover: { approval: 'manual' } },
      { id: 'objects-cancel' },
    );
    await waitForPhase(ferry, 'objects-cancel', 'AWAITING_APPROVAL', 180_000);
    expect((await suite.dbs.query('cancel_dst', `SELECT count(*)::int AS n FROM pg_views WHERE schemaname = 'shop'`))[0].n).toBe(1);
    await ferry.cancel('objects-cancel', 'test');
    expect((await resultWithin(ferry, 'objects-cancel', 120_000)).state).toBe('CANCELLED');
    // The target's catalog exactly as it was: every object, owner, grant and comment.
    expect(await catalogSnapshot(suite.dbs, 'cancel_dst')).toEqual(before);

    await ferry.start(
      { source: 'online_src', target: 'online_dst', mode: 'online', objects: 'all', tables: ['shop.*'], exclude: ['shop.scratch'], cutover: { afterwards: 'unfreeze' } },
      { id: 'objects-online' },
    );
    const result = await resultWithin(ferry, 'objects-online', 240_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(ferry, result);
    // The freeze's triggers leave the source once the cutover is done.
    await eventually(async () => (await suite.dbs.query<{ n: number }>('online_src', `SELECT count(*)::int AS n FROM pg_trigger WHERE tgname LIKE '\\_ferry%'`))[0].n === 0);
    expect(await schemaDump(suite.dbs.url('online_dst'), 'shop')).toEqual(await schemaDump(suite.dbs.url('online_src'), 'shop', NOT_MOVED));
    expect(await counts(suite.dbs, 'online_dst')).toEqual(await counts(suite.dbs, 'online_src'));
  }, 480_000);
});
