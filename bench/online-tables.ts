/**
 * `npm run bench:online-tables` — an online migration of many small tables (a schema per tenant),
 * on this machine: what the number of tables costs online (the time to approval, the outage).
 * For each shape (--shapes 100,500: that many tables of --rows 50 rows, spread over
 * --schemas 10 schemas) one migration, capture by triggers, validation checksum, manual approval
 * given as soon as every table is ready, while pgbench (--clients 2) updates a random row of a
 * random table in each transaction until the cutover's freeze ends it (of the first --busy
 * tables only, when given: most tenants of a real database are idle at any moment). Prints per shape: the
 * time to approval and where it went (approval-timeline.ts), the changes in the logs and the dirty
 * keys at the approval, the cutover's write outage and where it went, the parent's history length,
 * the worker's peak RSS, and whether both sides then hold the same rows (sums compared with SQL).
 * Figures, never assertions.
 */
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FerryClient } from '../src/client';
import { WORKER_PROCESS_ENV } from '../src/config';
import { connectionEnvVar } from '../src/core/names';
import { databaseUrl, DEFAULT_TEST_PG, ensurePostgres, runSql } from '../src/dev/postgres';
import { startDevServer } from '../src/dev/dev-server';
import { approvalTimeline } from './approval-timeline';
import { cutoverTimeline } from './cutover-timeline';
import { startProcess } from './process';
import { peakRssSince } from './rss';
import { PGBENCH } from './pgbench';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const SHAPES = arg('--shapes', '100,500').split(',').map(Number);
const ROWS = Number(arg('--rows', '50'));
const SCHEMAS = Number(arg('--schemas', '10'));
const CLIENTS = Number(arg('--clients', '2'));
const BUSY = args.includes('--busy') ? Number(arg('--busy', '0')) : undefined;
const ADMIN = arg('--pg', process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);
const ROOT = join(__dirname, '..');
const TAG = Date.now().toString(36);

const url = (db: string) => databaseUrl(ADMIN, db);
const names = (shape: number) => ({ source: `ferry_bench_ot_src_${TAG}_${shape}`, target: `ferry_bench_ot_tgt_${TAG}_${shape}` });

/** `tables` tables of ROWS rows in SCHEMAS schemas, 200 to a statement, and the writer's function. */
async function createSource(db: string, tables: number): Promise<void> {
  for (let s = 0; s < SCHEMAS; s += 1) await runSql(url(db), `CREATE SCHEMA tenant_${s}`);
  for (let from = 1; from <= tables; from += 200) {
    const to = Math.min(tables, from + 199);
    await runSql(
      url(db),
      `DO $$ BEGIN FOR t IN ${from}..${to} LOOP
         EXECUTE format('CREATE TABLE tenant_%s.t%s (id int PRIMARY KEY, v bigint NOT NULL, note text)', t % ${SCHEMAS}, t);
         EXECUTE format('INSERT INTO tenant_%s.t%s SELECT g, 0, md5(g::text) FROM generate_series(1, ${ROWS}) g', t % ${SCHEMAS}, t);
       END LOOP; END $$`,
    );
  }
  await runSql(
    url(db),
    `CREATE FUNCTION public.bench_touch(t int, k int) RETURNS void LANGUAGE plpgsql AS $$
     BEGIN EXECUTE format('UPDATE tenant_%s.t%s SET v = v + 1 WHERE id = $1', t % ${SCHEMAS}, t) USING k; END $$;
     ANALYZE`,
  );
}

/** Every table's rows summed into one figure: equal on both sides when nothing was lost or doubled. */
async function fingerprint(db: string, tables: number): Promise<string> {
  const parts = Array.from({ length: tables }, (_, i) => `SELECT count(*) AS n, sum(v) AS v, sum(hashtext(note)::bigint) AS h FROM tenant_${(i + 1) % SCHEMAS}.t${i + 1}`);
  const rows = await runSql(url(db), `SELECT sum(n)::text || '/' || sum(v)::text || '/' || sum(h)::text AS f FROM (${parts.join(' UNION ALL ')}) x`);
  return String((rows as { f: string }[])[0]?.f ?? '');
}

/** What the cutover's drain would have before it at this moment: the changes in the tables' logs, and the dirty keys to compare. */
async function backlog(source: string, target: string, id: string): Promise<string> {
  const logs = (await runSql(url(source), `SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%'`)) as { tablename: string }[];
  const counts = logs.map((l) => `SELECT count(*) AS n FROM _ferry_capture.${l.tablename}`);
  const changes = counts.length ? ((await runSql(url(source), `SELECT sum(n)::int AS n FROM (${counts.join(' UNION ALL ')}) x`)) as { n: number }[])[0].n : 0;
  const dirty = ((await runSql(url(target), `SELECT count(*)::int AS n FROM _ferry.dirty WHERE migration_id = '${id}'`)) as { n: number }[])[0].n;
  return `${changes} changes in the logs and ${dirty} dirty keys at the approval`;
}

async function waitForApprovalPhase(ferry: FerryClient, id: string): Promise<void> {
  for (;;) {
    const s = await ferry.status(id);
    if (s.endedAt) throw new Error(`migration ${id} ended early: ${JSON.stringify(s.error)}`);
    if (s.phase === 'AWAITING_APPROVAL') return;
    await new Promise((r) => setTimeout(r, 1000));
  }
}

async function shapeRun(ferry: FerryClient, shape: number, worker: number): Promise<string> {
  const { source, target } = names(shape);
  await createSource(source, shape);
  const script = join(tmpdir(), `ferry-bench-ot-${TAG}-${shape}.sql`);
  writeFileSync(script, `\\set t random(1, ${Math.min(shape, BUSY ?? shape)})\n\\set k random(1, ${ROWS})\nSELECT public.bench_touch(:t, :k);\n`);
  peakRssSince(worker);
  const writer = startProcess(PGBENCH, ['-n', '-c', String(CLIENTS), '-j', '1', '-T', '3600', '-f', script, url(source)]);
  const id = `bench-online-tables-${shape}-${TAG}`;
  const started = Date.now();
  try {
    await ferry.start({ id, source: `ot_src_${shape}`, target: `ot_tgt_${shape}`, mode: 'online', capture: 'trigger', tables: ['tenant_*.*'], cutover: { approval: 'manual', approvalTimeout: '2h' } }, {});
    await waitForApprovalPhase(ferry, id);
    const ready = Date.now() - started;
    const left = await backlog(source, target, id);
    await ferry.approve(id);
    const result = await ferry.result(id);
    if (result.state !== 'SUCCEEDED') throw new Error(`${id} ended ${result.state}: ${JSON.stringify(result.error)}`);
    const history = (await ferry.handle(id).describe()).historyLength;
    const timeline = await cutoverTimeline(ferry, id);
    const toApproval = await approvalTimeline(ferry, id, shape, started, started + ready);
    writer.child.kill();
    await writer.done;
    const same = (await fingerprint(source, shape)) === (await fingerprint(target, shape));
    return (
      `${shape.toLocaleString('en')} tables: ready for approval after ${(ready / 1000).toFixed(1)} s (${toApproval}; ${left}), whole run ${((Date.now() - started) / 1000).toFixed(1)} s, ` +
      `write outage ${result.cutover!.writeOutageMs} ms (${timeline}), parent history ${history} events, worker peak RSS ${peakRssSince(worker)} MB, ` +
      `rows ${same ? 'equal on both sides' : 'DIFFER'}`
    );
  } finally {
    writer.child.kill();
    await writer.done;
  }
}

async function main(): Promise<void> {
  await ensurePostgres(ADMIN);
  const server = await startDevServer({ headless: true });
  const env: NodeJS.ProcessEnv = { ...process.env, ...WORKER_PROCESS_ENV, TEMPORAL_ADDRESS: server.address, FERRY_LOG_LEVEL: 'warn' };
  for (const shape of SHAPES) {
    const { source, target } = names(shape);
    await runSql(ADMIN, `CREATE DATABASE ${source}`);
    await runSql(ADMIN, `CREATE DATABASE ${target}`);
    env[connectionEnvVar(`ot_src_${shape}`)] = url(source);
    env[connectionEnvVar(`ot_tgt_${shape}`)] = url(target);
  }
  const worker = startProcess(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'worker'], { env, keep: 20_000 });
  const ferry = await FerryClient.connect({ address: server.address });
  try {
    const touched = BUSY === undefined ? 'every table' : `the first ${BUSY} tables`;
    process.stdout.write(`online, ${ROWS} rows a table in ${SCHEMAS} schemas, pgbench -c ${CLIENTS} touching random rows of ${touched} until the freeze; one worker:\n`);
    for (const shape of SHAPES) process.stdout.write(`  ${await shapeRun(ferry, shape, worker.child.pid!)}\n`);
  } finally {
    await ferry.close();
    worker.child.kill();
    await worker.done;
    await server.stop();
    for (const shape of SHAPES) for (const db of Object.values(names(shape))) await runSql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
