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
  ) {}

  /** Creates one empty database per role (e.g. "source", "target"), on `server` (by default the test server). */
  static async create(suite: string, roles: string[], server = adminUrl()): Promise<TestDatabases> {
    const dbs = new TestDatabases(suite, server);
    const tag = randomBytes(3).toString('hex');
    await withClient(server, async (admin) => {
      for (const role of roles) {
        const name = `ferry_t_${suite}_${role}_${tag}`.toLowerCase().replace(/[^a-z0-9_]/g, '_');
        await admin.query(`CREATE DATABASE "${name}"`);
        dbs.names[role] = name;
      }
    });
    return dbs;
  }

  url(role: string): string {
    return databaseUrl(this.names[role], this.admin);
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
    await withClient(this.admin, async (admin) => {
      for (const name of Object.values(this.names)) await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    });
  }
}

/** All rows of a table as text, ordered by the given key: what "equal row for row" compares. */
export async function rowsAsText(dbs: TestDatabases, role: string, table: string, orderBy: string): Promise<string[]> {
  const rows = await dbs.query<{ r: string }>(role, `SELECT t::text AS r FROM ${table} AS t ORDER BY ${orderBy}`);
  return rows.map((x) => x.r);
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
