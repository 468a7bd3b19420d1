/**
 * Each suite owns its databases: created with unique names on FERRY_TEST_PG's server and
 * dropped afterwards, so suites can run side by side and leave nothing behind.
 */
import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import { DEFAULT_TEST_PG } from '../../src/dev/postgres';

export function adminUrl(): string {
  return process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG;
}

export function databaseUrl(database: string, admin = adminUrl()): string {
  const url = new URL(admin);
  url.pathname = `/${database}`;
  return url.toString();
}

/** The URL with another user (and password): a role's own connection to the same database. */
export function withCredentials(url: string, user: string, password?: string): string {
  const u = new URL(url);
  u.username = user;
  if (password !== undefined) u.password = password;
  return u.toString();
}

export async function withClient<T>(url: string, fn: (c: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export class TestDatabases {
  readonly names: Record<string, string> = {};

  private constructor(
    readonly suite: string,
    readonly admin: string,
    /** Roles whose database is on another server than `admin` (a server of another version), with its admin URL. */
    private readonly adminOf: Record<string, string> = {},
  ) {}

  /**
   * Creates one empty database per role (e.g. "source", "target"), on `server` (by default the
   * test server), or for a role in `servers` on the server given there.
   */
  static async create(suite: string, roles: string[], server = adminUrl(), servers: Record<string, string> = {}): Promise<TestDatabases> {
    const dbs = new TestDatabases(suite, server, servers);
    const tag = randomBytes(3).toString('hex');
    for (const role of roles) {
      const name = `ferry_t_${suite}_${role}_${tag}`.toLowerCase().replace(/[^a-z0-9_]/g, '_');
      await withClient(dbs.serverOf(role), (admin) => admin.query(`CREATE DATABASE "${name}"`));
      dbs.names[role] = name;
    }
    return dbs;
  }

  /** The admin URL of the server that holds a role's database. */
  serverOf(role: string): string {
    return this.adminOf[role] ?? this.admin;
  }

  url(role: string): string {
    return databaseUrl(this.names[role], this.serverOf(role));
  }

  async query<R extends Record<string, unknown> = Record<string, unknown>>(role: string, sql: string, params: unknown[] = []): Promise<R[]> {
    return withClient(this.url(role), async (c) => (await c.query(sql, params)).rows as R[]);
  }

  /** Runs a script of several statements. */
  async exec(role: string, sql: string): Promise<void> {
    await withClient(this.url(role), async (c) => {
      await c.query(sql);
    });
  }

  async drop(): Promise<void> {
    for (const [role, name] of Object.entries(this.names)) {
      await withClient(this.serverOf(role), async (admin) => {
        // DROP DATABASE … WITH (FORCE) is PostgreSQL 13's: on 12 its sessions are ended first.
        if ((await admin.query(`SELECT current_setting('server_version_num')::int < 130000 AS old`)).rows[0].old) {
          await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [name]);
          await admin.query(`DROP DATABASE IF EXISTS "${name}"`);
        } else {
          await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
        }
      });
    }
  }
}

/** All rows of a table as text, ordered by the given key: what "equal row for row" compares. */
export async function rowsAsText(dbs: TestDatabases, role: string, table: string, orderBy: string): Promise<string[]> {
  const rows = await dbs.query<{ r: string }>(role, `SELECT t::text AS r FROM ${table} AS t ORDER BY ${orderBy}`);
  return rows.map((x) => x.r);
}

/** A table's rows as a multiset (a table without a key): the count and a digest of every row's text in a stable order. */
export async function rowMultiset(dbs: TestDatabases, role: string, table: string): Promise<{ table: string; rows: number; digest: string }> {
  const [row] = await dbs.query<{ rows: number; digest: string }>(
    role,
    `SELECT count(*)::int AS rows, md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) AS digest FROM ${table} t`,
  );
  return { table, ...row };
}

/** What a database holds besides its contents: schemas, tables, types, triggers, functions. */
export async function objectInventory(dbs: TestDatabases, role: string): Promise<string[]> {
  const rows = await dbs.query<{ o: string }>(
    role,
    `SELECT 'schema ' || nspname AS o FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
     UNION ALL SELECT 'relation ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
     UNION ALL SELECT 'type ' || n.nspname || '.' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
      WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema' AND t.typtype IN ('e', 'd')
     UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal
     UNION ALL SELECT 'function ' || n.nspname || '.' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
     UNION ALL SELECT 'event trigger ' || evtname FROM pg_event_trigger
     ORDER BY 1`,
  );
  return rows.map((r) => r.o);
}

/**
 * The database's catalog as PostgreSQL names each object (pg_identify_object), with its owner,
 * privileges and comment where it has them: every row of the catalogs that hold objects of a
 * database (relations, types, functions, schemas, extensions, constraints, triggers, rules,
 * policies, defaults, casts, operators, collations, text search and the rest that have a
 * namespace), PostgreSQL's own objects (oids below 16384) left out. "Exactly as it was" compares
 * two of these.
 */
export async function catalogSnapshot(dbs: TestDatabases, role: string): Promise<string[]> {
  const rows = await dbs.query<{ o: string }>(
    role,
    `WITH objects AS (
       SELECT 'pg_class'::regclass AS catalog, oid, relowner AS owner, relacl::text AS acl FROM pg_class
       UNION ALL SELECT 'pg_type'::regclass, oid, typowner, typacl::text FROM pg_type
       UNION ALL SELECT 'pg_proc'::regclass, oid, proowner, proacl::text FROM pg_proc
       UNION ALL SELECT 'pg_namespace'::regclass, oid, nspowner, nspacl::text FROM pg_namespace
       UNION ALL SELECT 'pg_extension'::regclass, oid, extowner, NULL FROM pg_extension
       UNION ALL SELECT 'pg_constraint'::regclass, oid, NULL, NULL FROM pg_constraint
       UNION ALL SELECT 'pg_trigger'::regclass, oid, NULL, NULL FROM pg_trigger
       UNION ALL SELECT 'pg_rewrite'::regclass, oid, NULL, NULL FROM pg_rewrite
       UNION ALL SELECT 'pg_policy'::regclass, oid, NULL, NULL FROM pg_policy
       UNION ALL SELECT 'pg_attrdef'::regclass, oid, NULL, NULL FROM pg_attrdef
       UNION ALL SELECT 'pg_collation'::regclass, oid, collowner, NULL FROM pg_collation
       UNION ALL SELECT 'pg_operator'::regclass, oid, oprowner, NULL FROM pg_operator
       UNION ALL SELECT 'pg_cast'::regclass, oid, NULL, NULL FROM pg_cast
       UNION ALL SELECT 'pg_ts_config'::regclass, oid, cfgowner, NULL FROM pg_ts_config
       UNION ALL SELECT 'pg_event_trigger'::regclass, oid, evtowner, NULL FROM pg_event_trigger
       UNION ALL SELECT 'pg_publication'::regclass, oid, pubowner, NULL FROM pg_publication
       UNION ALL SELECT 'pg_statistic_ext'::regclass, oid, stxowner, NULL FROM pg_statistic_ext)
     SELECT i.type || ' ' || coalesce(i.identity, '?') || coalesce(' owner ' || pg_get_userbyid(o.owner), '') || coalesce(' acl ' || o.acl, '') ||
            coalesce(' comment ' || obj_description(o.oid, o.catalog::text), '') AS o
       FROM objects o, pg_identify_object(o.catalog, o.oid, 0) i
      WHERE o.oid >= 16384
      ORDER BY 1`,
  );
  return rows.map((r) => r.o);
}

/** Roles on the shared server (global: every database sees them), created when missing. */
export async function ensureRoles(...names: string[]): Promise<void> {
  await withClient(adminUrl(), async (c) => {
    for (const name of names) {
      await c.query(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${name.replace(/'/g, "''")}') THEN CREATE ROLE "${name.replace(/"/g, '""')}"; END IF; END $$`);
    }
  });
}
