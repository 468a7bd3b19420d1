/**
 * `ferry demo` and `npm run demo`: an online migration on this machine in one command. Uses
 * TEMPORAL_ADDRESS when a server answers there, else starts the embedded dev server (with the Web
 * UI); uses the local PostgreSQL (starting it when installed but stopped), else embedded
 * PostgreSQL; seeds customers / orders / order_items with foreign keys; starts two workers; runs
 * an online migration while a writer keeps changing rows; shows live progress; approves the
 * cutover; prints the result, the Web UI link and the signed callback a local receiver got;
 * checks both sides with SQL; cleans up (`keep` leaves everything running to explore).
 */
import { randomBytes } from 'node:crypto';
import { createServer, IncomingHttpHeaders } from 'node:http';
import { AddressInfo } from 'node:net';
import { Client } from 'pg';
import { Client as TemporalClient, Connection } from '@temporalio/client';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { FerryClient } from '../client';
import { verify } from '../signature';
import { watch } from '../view/watch';
import { formatResult } from '../view/format';
import { temporalConfig } from '../config';
import { startEmbeddedPostgres } from './embedded-postgres';
import { startPrivateCluster } from './pg-cluster';
import { locatePgBouncer, PgBouncer, pooledServer, startPgBouncer } from './pgbouncer';
import { silentLogger } from '../logger';
import { connectionEnvVar } from '../core/names';
import { databaseUrl, DEFAULT_TEST_PG, ensurePostgres, runSql } from './postgres';
import { DevServer, startDevServer, waitForTemporal } from './dev-server';
import { createFerryWorker } from '../worker';

export interface DemoOptions {
  /** Leave everything running until Ctrl-C. */
  keep?: boolean;
  /** Orders to seed (customers are a fifth, order items twice as many). */
  orders?: number;
  /** Admin URL of the PostgreSQL server to use; it must answer (no fallback when given). */
  pg?: string;
  /** Use embedded PostgreSQL even when a server answers. */
  embeddedPg?: boolean;
  /** A major-version upgrade: the source on PostgreSQL 13, the target on 17, each a private cluster of npm's server builds. */
  upgrade?: boolean;
  /** false: the writer connects to the source directly even when PgBouncer is installed. */
  pgbouncer?: boolean;
}

/** The versions `--upgrade` moves between: a source near its end of life, a current target. */
export const UPGRADE = { from: 13, to: 17 } as const;

const HOOK_SECRET_VAR = 'FERRY_SECRET_DEMO_HOOK';

const say = (line: string) => process.stdout.write(`${line}\n`);

const sql = runSql;

const SEED = (orders: number) => {
  const customers = Math.max(1, Math.floor(orders / 5));
  return `
CREATE SCHEMA shop;
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
    FROM generate_series(1, ${customers}) g;
INSERT INTO shop.orders (customer_id, status, total, placed_at)
  SELECT 1 + g % ${customers}, (ARRAY['new','paid','shipped','cancelled'])[1 + g % 4]::shop.order_status,
         (g % 50000) / 100.0, '2024-01-01'::timestamptz + g * interval '1 minute'
    FROM generate_series(1, ${orders}) g;
INSERT INTO shop.order_items SELECT o, l, 'SKU-' || (o * 7 + l) % 1000, 1 + l, (o % 900) / 10.0 + 1
    FROM generate_series(1, ${orders}) o, generate_series(1, 2) l;
ANALYZE;`;
};

const TABLES: [string, string][] = [
  ['shop.customers', 'id'],
  ['shop.orders', 'id'],
  ['shop.order_items', 'order_id, line'],
];

const FINGERPRINT = (table: string, key: string) =>
  `SELECT count(*)::int AS rows, md5(string_agg(t::text, E'\\n' ORDER BY ${key})) AS digest FROM ${table} t`;

interface DemoDatabases {
  kind: string;
  source: string;
  target: string;
  cleanup(): Promise<void>;
}

/** Two fresh databases on the server at `admin`. */
async function databasesOn(admin: string, kind: string, tag: string): Promise<DemoDatabases> {
  const names = [`ferry_demo_source_${tag}`, `ferry_demo_target_${tag}`];
  for (const name of names) await sql(admin, `CREATE DATABASE ${name}`);
  return {
    kind,
    source: databaseUrl(admin, names[0]),
    target: databaseUrl(admin, names[1]),
    async cleanup() {
      for (const name of names) await sql(admin, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
    },
  };
}

/**
 * The PostgreSQL named by --pg (it must answer); else the local one (FERRY_TEST_PG or the
 * default URL), started when installed but stopped; else embedded PostgreSQL.
 */
async function databases(options: DemoOptions, tag: string): Promise<DemoDatabases> {
  if (options.upgrade) return upgradeDatabases(tag);
  if (!options.embeddedPg) {
    const admin = options.pg ?? process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG;
    try {
      await ensurePostgres(admin, say);
      return await databasesOn(admin, `PostgreSQL at ${new URL(admin).host}`, tag);
    } catch (err) {
      if (options.pg) throw err;
      say(`PostgreSQL: none answers at ${new URL(admin).host}; falling back to embedded PostgreSQL`);
    }
  }
  const embedded = await startEmbeddedPostgres(say);
  try {
    const dbs = await databasesOn(embedded.url, `embedded PostgreSQL 15 at ${new URL(embedded.url).host} (removed afterwards)`, tag);
    return { ...dbs, cleanup: () => embedded.stop() };
  } catch (err) {
    await embedded.stop();
    throw err;
  }
}

/**
 * `--upgrade`: two private clusters started at once from npm's real server builds, the source
 * on PostgreSQL UPGRADE.from (wal_level=logical, so the capture is logical) and the target on
 * UPGRADE.to; both deleted afterwards.
 */
async function upgradeDatabases(tag: string): Promise<DemoDatabases> {
  say(`PostgreSQL: starting ${UPGRADE.from} (the source) and ${UPGRADE.to} (the target), each a private cluster of npm's server builds…`);
  const started = await Promise.allSettled([
    startPrivateCluster({ wal_level: 'logical', max_replication_slots: '10' }, 'ferry-demo-pg-', UPGRADE.from),
    startPrivateCluster({}, 'ferry-demo-pg-', UPGRADE.to),
  ]);
  const clusters = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const stop = () => Promise.all(clusters.map((c) => c.stop())).then(() => undefined);
  try {
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    const [from, to] = clusters;
    const name = (kind: string) => `ferry_demo_${kind}_${tag}`;
    await sql(from.url, `CREATE DATABASE ${name('source')}`);
    await sql(to.url, `CREATE DATABASE ${name('target')}`);
    const versions = await Promise.all(clusters.map(async (c) => (await sql(c.url, 'SHOW server_version'))[0].server_version as string));
    return {
      kind: `embedded PostgreSQL ${versions[0]} at ${new URL(from.url).host} → PostgreSQL ${versions[1]} at ${new URL(to.url).host} (a major-version upgrade; both removed afterwards)`,
      source: databaseUrl(from.url, name('source')),
      target: databaseUrl(to.url, name('target')),
      cleanup: stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

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

/** A local HTTP receiver for the result callback; verifies the HMAC signature it carries. */
async function callbackReceiver(secret: string) {
  const received: { headers: IncomingHttpHeaders; body: string; verified: boolean }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const verified = verify(secret, String(req.headers['x-ferry-signature'] ?? ''), body);
      received.push({ headers: req.headers, body, verified });
      res.writeHead(verified ? 200 : 401).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/ferry-result`, received, close: () => server.close() };
}

/**
 * The application: keeps placing orders, changing their status and removing order lines until
 * the cutover freezes the source — then reports the error a real writer would see. Through
 * PgBouncer (`pooled`), the switch holds it instead and sends its next transaction to the
 * target: it asks which database it is on first, and stops there without writing, so the demo
 * can compare both sides as the cutover left them.
 */
function startWriter(url: string, sourceDatabase: string) {
  const stats = { transactions: 0, retried: 0, stoppedBy: '', longestMs: 0, reachedTarget: '' };
  let stop = false;
  const client = new Client({ connectionString: url });
  client.on('error', () => undefined); // a dropped connection surfaces on the next query below
  const done = (async () => {
    await client.connect();
    try {
      while (!stop) {
        const began = Date.now();
        try {
          await client.query('BEGIN');
          const [{ db }] = (await client.query<{ db: string }>('SELECT current_database() AS db')).rows;
          if (db !== sourceDatabase) {
            await client.query('ROLLBACK');
            stats.reachedTarget = `its next transaction waited ${Date.now() - began} ms and then ran on the target (${db})`;
            return;
          }
          await writeOrder(client, stats.transactions);
          await client.query('COMMIT');
          stats.transactions += 1;
          stats.longestMs = Math.max(stats.longestMs, Date.now() - began);
        } catch (err) {
          await client.query('ROLLBACK').catch(() => undefined);
          // The freeze at cutover: the error a real application gets, naming the migration.
          if (/frozen/.test((err as Error).message)) {
            stats.stoppedBy = (err as Error).message;
            return;
          }
          // A deadlock or lock timeout while the freeze takes its locks: retry. A lost
          // connection (the demo is cleaning up) ends the writer.
          const code = (err as { code?: string }).code;
          if (code !== '40P01' && code !== '55P03' && code !== '40001') {
            stats.stoppedBy = (err as Error).message;
            return;
          }
          stats.retried += 1;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      await client.end().catch(() => undefined);
    }
  })().catch((err: Error) => {
    stats.stoppedBy = err.message;
  });
  return {
    stats,
    stop: async () => {
      stop = true;
      await done;
    },
  };
}

/** One of the writer's transactions: an order placed with two lines, another paid, a line removed, a customer renamed. */
async function writeOrder(client: Client, n: number): Promise<void> {
  const [{ id }] = (
    await client.query(
      `INSERT INTO shop.orders (customer_id, status, total, placed_at)
       SELECT id, 'new', 42.50, now() FROM shop.customers ORDER BY random() LIMIT 1 RETURNING id`,
    )
  ).rows;
  await client.query(`INSERT INTO shop.order_items VALUES ($1, 1, 'SKU-NEW', 1, 21.25), ($1, 2, 'SKU-NEW', 2, 10.63)`, [id]);
  await client.query(`UPDATE shop.orders SET status = 'paid' WHERE id = (SELECT max(id) - 100 FROM shop.orders)`);
  await client.query(`DELETE FROM shop.order_items WHERE (order_id, line) = (SELECT order_id, line FROM shop.order_items ORDER BY order_id LIMIT 1)`);
  await client.query(`UPDATE shop.customers SET name = name || '.' WHERE id = $1`, [1 + (n % 50)]);
}

/** What the writer saw, in one line. */
function writerLine(stats: ReturnType<typeof startWriter>['stats'], pooled: boolean): string {
  const committed = `${stats.transactions} transactions committed during the migration${stats.retried ? ` (${stats.retried} retried)` : ''}`;
  if (!pooled) return `writer: ${committed}; then the source refused writes: ${stats.stoppedBy || '(writer stopped first)'}`;
  const end = stats.reachedTarget
    ? `none refused; PgBouncer held it through the switch: ${stats.reachedTarget}, where the demo stops writing so both sides can be compared`
    : `then: ${stats.stoppedBy || '(writer stopped first)'}`;
  return `writer (through PgBouncer): ${committed}, its longest ${stats.longestMs} ms; ${end}`;
}

/** Runs the demo; resolves to the exit code (0 when both sides were found identical). */
export async function runDemo(options: DemoOptions = {}): Promise<number> {
  const orders = options.orders ?? 60_000;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const tag = Date.now().toString(36);
  const dbs = await databases(options, tag);
  const cleanups: (() => Promise<unknown>)[] = [() => dbs.cleanup()];
  try {
    const temporal = await temporalServer();
    cleanups.push(async () => temporal.server?.stop()); // last: after the workers
    say(`Databases: ${dbs.kind}`);
    say(`Seeding the source: ${Math.floor(orders / 5)} customers, ${orders} orders, ${orders * 2} order items…`);
    await sql(dbs.source, SEED(orders));

    const secret = randomBytes(16).toString('hex');
    const receiver = await callbackReceiver(secret);
    cleanups.unshift(async () => receiver.close());
    const taskQueue = `ferry-demo-${tag}`;
    const pooler = options.pgbouncer === false ? undefined : await demoPooler(dbs);
    if (pooler) cleanups.unshift(() => pooler.stop());
    cleanups.unshift(await startWorkers(temporal, taskQueue, workerEnv(dbs, secret, pooler)));
    say('Workers: 2 running in this process (the pool; `ferry worker` runs one per process)');

    const connection = await Connection.connect({ address: temporal.address });
    cleanups.unshift(() => connection.close());
    const ferry = FerryClient.fromClient(new TemporalClient({ connection, namespace: temporal.namespace }), { taskQueue });
    // PgBouncer is on this machine: the workers themselves serve the switch's queue.
    const spec = demoSpec(tag, receiver.url, pooler ? { admin: 'demo_pooler', database: 'shop', configFile: pooler.databasesFile, taskQueue } : undefined);
    say(`\nferry start: ${JSON.stringify(spec)}`);
    const writer = startWriter(pooler ? pooler.url('shop') : dbs.source, new URL(dbs.source).pathname.slice(1));
    cleanups.unshift(() => writer.stop());
    const started = await ferry.start(spec);
    say(`migration ${started.id} passed preflight and is running; a writer keeps changing the source`);
    if (temporal.uiUrl) say(`watch it in the Web UI: ${temporal.uiUrl}/namespaces/${temporal.namespace}/workflows/${started.id}`);

    await watchAndApprove(ferry, started.id);
    await writer.stop();
    const result = await ferry.result(started.id);
    say(`\n${formatResult(result)}`);
    say(writerLine(writer.stats, pooler !== undefined));
    const callbackOk = reportCallbacks(receiver);
    const equal = await reportTables(dbs, result.state === 'SUCCEEDED');
    if (temporal.uiUrl) say(`\nWeb UI: ${temporal.uiUrl}/namespaces/${temporal.namespace}/workflows/${started.id}`);
    if (options.keep) await keepRunning(temporal, dbs);
    return equal && callbackOk ? 0 : 1;
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  }
}

type DemoTemporal = Awaited<ReturnType<typeof temporalServer>>;

/**
 * PgBouncer in front of the source when it is installed (Debian's `pgbouncer`), so the writer can
 * be switched by the cutover; otherwise the writer connects to the source and meets the freeze.
 */
async function demoPooler(dbs: DemoDatabases): Promise<PgBouncer | undefined> {
  if (!locatePgBouncer()) {
    say('PgBouncer: not installed, so the writer connects to the source directly and meets the freeze (apt-get install pgbouncer to see the switch)');
    return undefined;
  }
  const pooler = await startPgBouncer({ shop: pooledServer(dbs.source) });
  say(`PgBouncer: on 127.0.0.1:${pooler.port} in front of the source (transaction pooling); the writer goes through it and the cutover switches it (cutover.switch: pgbouncer)`);
  return pooler;
}

/** What the workers see: the two connections (and PgBouncer's admin console), the callback's secret, and leave to call the receiver on 127.0.0.1. */
function workerEnv(dbs: DemoDatabases, secret: string, pooler: PgBouncer | undefined): NodeJS.ProcessEnv {
  return {
    ...process.env,
    [connectionEnvVar('shop_legacy')]: dbs.source,
    [connectionEnvVar('shop_v2')]: dbs.target,
    ...(pooler ? { [connectionEnvVar('demo_pooler')]: pooler.adminUrl } : {}),
    [HOOK_SECRET_VAR]: secret,
    // The demo's receiver listens on 127.0.0.1, which workers refuse as a callback target unless allowed.
    FERRY_CALLBACK_ALLOW_PRIVATE: 'true',
  };
}

/** Two workers in this process, the demo's pool; the returned function shuts them down. */
async function startWorkers(temporal: DemoTemporal, taskQueue: string, env: NodeJS.ProcessEnv): Promise<() => Promise<void>> {
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
  return async () => {
    workers.forEach((w) => w.shutdown());
    await Promise.allSettled(runs);
  };
}

function demoSpec(tag: string, callbackUrl: string, pgbouncer?: Record<string, string>) {
  return {
    id: `demo-${tag}`,
    source: 'shop_legacy',
    target: 'shop_v2',
    mode: 'online',
    batchRows: 10_000,
    tables: ['shop.customers', 'shop.orders', 'shop.order_items'],
    cutover: { approval: 'manual', approvalTimeout: '10m', ...(pgbouncer ? { switch: { pgbouncer } } : {}) },
    callback: { url: callbackUrl, secret: HOOK_SECRET_VAR },
    metadata: { team: 'demo' },
  };
}

/** Live progress until the migration ends; approves the cutover once every table caught up and validated. */
async function watchAndApprove(ferry: FerryClient, id: string): Promise<void> {
  let approvedAt = 0;
  await watch(ferry, id, {
    intervalMs: 500,
    onStatus: async (s) => {
      if (s.phase !== 'AWAITING_APPROVAL' || approvedAt) return undefined;
      approvedAt = Date.now();
      await ferry.approve(id);
      const lag = s.tables.map((t) => `${t.source} lag ${t.lag?.pendingChanges ?? 0}`).join(', ');
      return `every table caught up and validated (${lag}): ferry approve ${id}`;
    },
  });
}

/** Shows the callbacks the receiver got; true when exactly one came and its signature verifies. */
function reportCallbacks(receiver: Awaited<ReturnType<typeof callbackReceiver>>): boolean {
  say('\ncallback received by the local receiver:');
  for (const r of receiver.received) {
    const body = JSON.parse(r.body) as { task_id: string; state: string; duration: string };
    say(`  POST ${receiver.url}  Idempotency-Key: ${r.headers['idempotency-key']}`);
    say(`  X-Ferry-Signature: ${r.headers['x-ferry-signature']}  (${r.verified ? 'verified with the shared secret' : 'DOES NOT VERIFY'})`);
    say(`  body: task_id=${body.task_id} state=${body.state} duration=${body.duration} …`);
  }
  return receiver.received.length === 1 && receiver.received[0].verified;
}

/** Compares every table's fingerprint on both sides with SQL; true when the migration succeeded and all are identical. */
async function reportTables(dbs: DemoDatabases, succeeded: boolean): Promise<boolean> {
  say('\nchecking with SQL on both databases (the source is frozen now, so both are final):');
  let equal = succeeded;
  for (const [table, key] of TABLES) {
    const [[s], [t]] = await Promise.all([sql(dbs.source, FINGERPRINT(table, key)), sql(dbs.target, FINGERPRINT(table, key))]);
    const same = s.rows === t.rows && s.digest === t.digest;
    equal &&= same;
    say(`  ${table}: source ${s.rows} rows, target ${t.rows} rows, ${same ? 'identical' : 'DIFFERENT'}`);
  }
  return equal;
}

/** `--keep`: says where everything is and waits for Ctrl-C. */
async function keepRunning(temporal: DemoTemporal, dbs: DemoDatabases): Promise<void> {
  say(`\n--keep: leaving everything running. Temporal ${temporal.address}; databases on ${dbs.kind}:`);
  // Full URLs: embedded PostgreSQL has a random password, and psql needs it to look around.
  say(`  source ${dbs.source}\n  target ${dbs.target}`);
  say('Press Ctrl-C to stop and clean up.');
  await new Promise((resolve) => process.once('SIGINT', resolve));
}

