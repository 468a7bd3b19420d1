/**
 * Key collations whose library versions differ between the two servers. The shared server's ICU
 * (Debian's) and embedded PostgreSQL's bundled ICU give the same collation name and locale
 * different versions, as a source and target on two releases of an operating system do: the
 * same keys may sort differently, so key ranges would cut the sides in different places.
 * Preflight must then order keys byte-wise (COLLATE "C") on both sides; with equal versions
 * (both tables on one server) it keeps the column's own order, which its index serves.
 */
import { ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { MockActivityEnvironment as SdkMockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { Client } from 'pg';
import { createActivities } from '../../activities';
import { MigrationPlan } from '../../src/core/plan';
import { ConnectionRegistry } from '../../src/db/connections';
import { parseSpec } from '../../src/core/spec';
import { silentLogger } from '../../src/logger';
import { TestDatabases } from '../helpers/databases';

const TABLE = `CREATE TABLE public.names (name text COLLATE "und-x-icu" PRIMARY KEY, n int)`;

/**
 * Embedded PostgreSQL in a child process (the package is an ES module, which jest's CommonJS
 * cannot import): it prints its URL and stops, removing its data directory, when stdin closes.
 */
async function startEmbedded(): Promise<{ url: string; process: ChildProcess }> {
  const script = `require(${JSON.stringify(join(__dirname, '../../dist/src/dev/embedded-postgres'))}).startEmbeddedPostgres(() => undefined).then((s) => {
    console.log(s.url);
    process.stdin.on('end', () => s.stop().then(() => process.exit(0)));
    process.stdin.resume();
  }, (err) => { console.error(err.message); process.exit(1); });`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', () => out.includes('\n') && resolve(out.trim()));
    child.on('exit', (code) => reject(new Error(`embedded PostgreSQL exited with ${code}`)));
  });
  return { url, process: child };
}

async function version(url: string): Promise<string> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(`SELECT pg_collation_actual_version(oid) AS v FROM pg_collation WHERE collname = 'und-x-icu'`)).rows[0].v;
  } finally {
    await client.end();
  }
}

describe('key collations of different library versions', () => {
  let dbs: TestDatabases;
  let embedded: { url: string; process: ChildProcess };
  let connections: ConnectionRegistry;
  let activities: ReturnType<typeof createActivities>;

  beforeAll(async () => {
    dbs = await TestDatabases.create('collv', ['source', 'target']);
    await dbs.exec('source', `${TABLE}; INSERT INTO public.names SELECT 'n' || g, g FROM generate_series(1, 100) g`);
    embedded = await startEmbedded();
    const env = { FERRY_CONN_SRC: dbs.url('source'), FERRY_CONN_SAME: dbs.url('target'), FERRY_CONN_OTHER: embedded.url };
    connections = new ConnectionRegistry({ env });
    activities = createActivities({ connections, logger: silentLogger(), env });
  }, 120_000);

  afterAll(async () => {
    await connections?.close();
    if (embedded) {
      embedded.process.stdin!.end();
      await once(embedded.process, 'exit');
    }
    await dbs?.drop();
  });

  const preflight = (target: string) =>
    new SdkMockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') }).run(activities.preflight, {
      migrationId: `collv-${target}`,
      spec: parseSpec({ source: 'src', target, tables: ['public.names'] }),
    }) as Promise<MigrationPlan>;

  it('orders keys byte-wise on both sides when the versions differ, and by the column’s collation when they are equal', async () => {
    // The premise: one collation name, two versions.
    const [mine, theirs] = [await version(dbs.url('source')), await version(embedded.url)];
    expect(mine).not.toBe(theirs);

    const other = await preflight('other');
    expect(other.tables[0].keyCollateC).toBe(true);
    const same = await preflight('same');
    expect(same.tables[0].keyCollateC).toBe(false);
  });
});
