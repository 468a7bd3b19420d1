/**
 * `npm run demo`: a whole migration on this machine in one command. Uses TEMPORAL_ADDRESS when a
 * server answers there, else starts the embedded dev server (with the Web UI); creates a source
 * and a target database on the local PostgreSQL, seeds customers / orders / order_items with
 * foreign keys, runs workers in this process, migrates, checks the result with SQL on both
 * sides, and cleans up (`--keep` leaves everything running to explore).
 *
 * Options: --keep, --rows N (orders; default 60000), --pg URL (admin URL; default FERRY_TEST_PG
 * or postgres://postgres@127.0.0.1:5432/postgres).
 */
import { Client } from 'pg';
import { Connection } from '@temporalio/client';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { FerryClient } from '../src/client';
import { watch } from '../src/cli/watch';
import { formatResult } from '../src/cli/output';
import { temporalConfig } from '../src/config';
import { silentLogger } from '../src/logger';
import { connectionEnvVar } from '../src/names';
import { DEFAULT_TEST_PG, ensurePostgres } from '../src/postgres';
import { DevServer, startDevServer, waitForTemporal } from '../src/temporal/dev-server';
import { createFerryWorker } from '../src/worker';

const args = process.argv.slice(2);
const keep = args.includes('--keep');
const rowsArg = args.indexOf('--rows');
const ORDERS = rowsArg >= 0 ? Number(args[rowsArg + 1]) : 60_000;
const pgArg = args.indexOf('--pg');
const ADMIN_PG = pgArg >= 0 ? args[pgArg + 1] : (process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);

const say = (line: string) => process.stdout.write(`${line}\n`);

function dbUrl(name: string): string {
  const url = new URL(ADMIN_PG);
  url.pathname = `/${name}`;
  return url.toString();
}

async function sql(url: string, text: string): Promise<Record<string, unknown>[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const result = await client.query(text);
    return (Array.isArray(result) ? result[result.length - 1] : result).rows;
  } finally {
    await client.end();
  }
}

const SEED = (orders: number) => `
CREATE TYPE shop.order_status AS ENUM ('new', 'paid', 'shipped', 'cancelled');
CREATE TABLE shop.customers (
  id bigserial PRIMARY KEY, email text NOT NULL UNIQUE, name text NOT NULL, country char(2),
  created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE shop.orders (
  id bigserial PRIMARY KEY, customer_id bigint NOT NULL REFERENCES shop.customers (id),
  status shop.order_status NOT NULL DEFAULT 'new', total numeric(12,2) NOT NULL CHECK (total >= 0),
  placed_at timestamptz NOT NULL);
CREATE INDEX orders_customer ON shop.orders (customer_id);
CREATE TABLE shop.order_items (
  order_id bigint NOT NULL REFERENCES shop.orders (id), line int NOT NULL, sku text NOT NULL,
  quantity int NOT NULL CHECK (quantity > 0), price numeric(10,2) NOT NULL, PRIMARY KEY (order_id, line));
INSERT INTO shop.customers (email, name, country, created_at)
  SELECT 'customer' || g || '@example.com', 'Customer ' || g, (ARRAY['DE','FR','US','CN','BR'])[1 + g % 5],
         '2023-01-01'::timestamptz + g * interval '7 minutes'
    FROM generate_series(1, ${Math.max(1, Math.floor(orders / 5))}) g;
INSERT INTO shop.orders (customer_id, status, total, placed_at)
  SELECT 1 + g % ${Math.max(1, Math.floor(orders / 5))}, (ARRAY['new','paid','shipped','cancelled'])[1 + g % 4]::shop.order_status,
         (g % 50000) / 100.0, '2024-01-01'::timestamptz + g * interval '1 minute'
    FROM generate_series(1, ${orders}) g;
INSERT INTO shop.order_items SELECT o, l, 'SKU-' || (o * 7 + l) % 1000, 1 + l, (o % 900) / 10.0 + 1
    FROM generate_series(1, ${orders}) o, generate_series(1, 2) l;
ANALYZE;`;

const FINGERPRINT = (table: string, key: string) =>
  `SELECT count(*)::int AS rows, md5(string_agg(t::text, E'\\n' ORDER BY ${key})) AS digest FROM ${table} t`;

async function temporalServer(): Promise<{ address: string; namespace: string; server?: DevServer; uiUrl?: string }> {
  if (process.env.TEMPORAL_ADDRESS) {
    const config = temporalConfig();
    await waitForTemporal(config.address, config.namespace, 5_000);
    say(`Temporal: using ${config.address} (TEMPORAL_ADDRESS)`);
    return { address: config.address, namespace: config.namespace };
  }
  say('Temporal: starting the embedded dev server…');
  const server = await startDevServer({ report: say });
  say(`Temporal: dev server on ${server.address}, Web UI ${server.uiUrl}`);
  return { address: server.address, namespace: server.namespace, server, uiUrl: server.uiUrl };
}

async function main(): Promise<number> {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  await ensurePostgres(ADMIN_PG, say);
  const tag = Date.now().toString(36);
  const sourceDb = `ferry_demo_source_${tag}`;
  const targetDb = `ferry_demo_target_${tag}`;
  const temporal = await temporalServer();
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    await sql(ADMIN_PG, `CREATE DATABASE ${sourceDb}`);
    await sql(ADMIN_PG, `CREATE DATABASE ${targetDb}`);
    cleanups.push(() => sql(ADMIN_PG, `DROP DATABASE IF EXISTS ${sourceDb} WITH (FORCE)`));
    cleanups.push(() => sql(ADMIN_PG, `DROP DATABASE IF EXISTS ${targetDb} WITH (FORCE)`));
    say(`PostgreSQL: seeding ${sourceDb} with ${ORDERS / 5} customers, ${ORDERS} orders, ${ORDERS * 2} order items…`);
    await sql(dbUrl(sourceDb), `CREATE SCHEMA shop; ${SEED(ORDERS)}`);

    const taskQueue = `ferry-demo-${tag}`;
    const env = { ...process.env, [connectionEnvVar('shop_legacy')]: dbUrl(sourceDb), [connectionEnvVar('shop_v2')]: dbUrl(targetDb) };
    const workers = await Promise.all(
      [1, 2].map((n) =>
        createFerryWorker({
          temporal: { address: temporal.address, namespace: temporal.namespace, taskQueue },
          logger: silentLogger(),
          env,
          identity: `demo-worker-${n}`,
          shutdownGraceTime: '5 seconds',
        }),
      ),
    );
    const runs = workers.map((w) => w.run());
    cleanups.unshift(async () => {
      workers.forEach((w) => w.shutdown());
      await Promise.allSettled(runs);
    });
    say('Workers: 2 running in this process');

    const connection = await Connection.connect({ address: temporal.address });
    cleanups.unshift(() => connection.close());
    const { Client: TemporalClient } = await import('@temporalio/client');
    const ferry = FerryClient.fromClient(new TemporalClient({ connection, namespace: temporal.namespace }), { taskQueue });
    const spec = {
      id: `demo-${tag}`,
      source: 'shop_legacy',
      target: 'shop_v2',
      batchRows: 10_000,
      tables: ['shop.customers', 'shop.orders', 'shop.order_items'],
      metadata: { team: 'demo' },
    };
    say(`\nferry start: ${JSON.stringify(spec)}`);
    const started = await ferry.start(spec);
    say(`migration ${started.id} passed preflight and is running`);
    if (temporal.uiUrl) say(`watch it in the Web UI: ${temporal.uiUrl}/namespaces/${temporal.namespace}/workflows/${started.id}`);
    await watch(ferry, started.id, { intervalMs: 500 });
    const result = await ferry.result(started.id);
    say(`\n${formatResult(result)}`);

    say('\nchecking with SQL on both databases:');
    let equal = result.state === 'SUCCEEDED';
    for (const [table, key] of [
      ['shop.customers', 'id'],
      ['shop.orders', 'id'],
      ['shop.order_items', 'order_id, line'],
    ]) {
      const [[s], [t]] = await Promise.all([sql(dbUrl(sourceDb), FINGERPRINT(table, key)), sql(dbUrl(targetDb), FINGERPRINT(table, key))]);
      const same = s.rows === t.rows && s.digest === t.digest;
      equal &&= same;
      say(`  ${table}: source ${s.rows} rows, target ${t.rows} rows, ${same ? 'identical' : 'DIFFERENT'}`);
    }
    if (keep) {
      say(`\n--keep: leaving everything running. Databases ${sourceDb} and ${targetDb}; Temporal ${temporal.address}.`);
      say('Press Ctrl-C to stop and clean up.');
      await new Promise((resolve) => process.once('SIGINT', resolve));
    }
    return equal ? 0 : 1;
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
    await temporal.server?.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`demo failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
