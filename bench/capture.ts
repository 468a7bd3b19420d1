/**
 * `npm run bench:capture` — what capturing changes costs the application's writes, and how much
 * of that is PostgreSQL's own logical decoding, side by side in one run.
 *
 * pgbench's TPC-B-like load (scale --scale, pgbench_history with a bigserial key as in
 * bench:online) runs for --seconds under each of these in turn, --repeat rounds interleaved so
 * that the machine's drift falls on all alike:
 *   - none: no capture at all;
 *   - trigger: Ferry's trigger capture installed (rows' keys logged by triggers, nothing applied);
 *   - pg_recvlogical: PostgreSQL's own logical client draining a pgoutput slot of a publication
 *     of the same tables to /dev/null — the decoding any WAL-based capture pays, and nothing else;
 *   - pg_recvlogical, key columns only: the same with a publication restricted to the tables'
 *     key columns (what a column list would save the WAL sender);
 *   - logical: Ferry's logical capture installed and its consumer (streamChanges) streaming the
 *     slot and queueing keys into the change logs.
 * The activities are called directly (no Temporal server); each round installs and removes its
 * capture, so no backlog or slot carries over. Prints pgbench's TPS (median of the rounds and
 * its ratio to none), the CPU seconds the WAL sender and Ferry's consumer spent per 10,000
 * transactions, and the keys the consumer queued. Figures, never assertions.
 *
 * Needs wal_level=logical: without --pg it starts a private cluster in a temporary directory
 * (initdb from /usr/lib/postgresql/15/bin; the shared server is never reconfigured).
 *
 * Options: --scale N (10), --clients N (4), --seconds N (20), --repeat N (3),
 * --only none,trigger,… (a subset, by the names above: none, trigger, recvlogical, recvlogical-keys,
 * logical), --pg URL (admin URL of a wal_level=logical server to use instead).
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../activities';
import { MigrationPlan } from '../src/core/plan';
import { parseSpec } from '../src/core/spec';
import { quoteQualified, quoteIdent } from '../src/core/identifiers';
import { ConnectionRegistry } from '../src/db/connections';
import { logicalNames } from '../src/db/logical-sql';
import { databaseUrl, runSql } from '../src/dev/postgres';
import { silentLogger } from '../src/logger';
import { logRows, output, PGBENCH, pgbenchTps } from './pgbench';
// The tests' private cluster: initdb in a temporary directory, removed on stop.
import { startLogicalCluster } from '../test/helpers/logical-cluster';
import { median } from './figures';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const SCALE = Number(arg('--scale', '10'));
const CLIENTS = Number(arg('--clients', '4'));
const SECONDS = Number(arg('--seconds', '20'));
const REPEAT = Number(arg('--repeat', '3'));
const PG = arg('--pg', '');
const BIN = process.env.FERRY_PG_BIN ?? '/usr/lib/postgresql/15/bin';
const VARIANTS = ['none', 'trigger', 'recvlogical', 'recvlogical-keys', 'logical'] as const;
type Variant = (typeof VARIANTS)[number];
const ONLY = arg('--only', VARIANTS.join(',')).split(',') as Variant[];
const TABLES = ['pgbench_accounts', 'pgbench_branches', 'pgbench_tellers', 'pgbench_history'];

const LABELS: Record<Variant, string> = {
  none: 'no capture',
  trigger: 'Ferry, trigger capture',
  recvlogical: "pg_recvlogical (PostgreSQL's own client), pgoutput",
  'recvlogical-keys': 'pg_recvlogical, publication of the key columns only',
  logical: "Ferry, logical capture (its consumer streaming)",
};

interface Measure {
  tps: number;
  /** CPU seconds of the WAL sender decoding for the consumer; null without one. */
  walSenderCpu: number | null;
  /** CPU seconds of Ferry's consumer (this process) while pgbench ran; null when it did not run. */
  consumerCpu: number | null;
  keys: number | null;
}

async function exec(command: string, argv: string[]): Promise<string> {
  const { code, out } = await output(command, argv);
  if (code !== 0) throw new Error(`${command} exited with ${code}:\n${out}`);
  return out;
}

/** CPU seconds (user + system) a process has used so far, from /proc; null once it is gone. */
function cpuSeconds(pid: number): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in USER_HZ ticks
  } catch {
    return null;
  }
}

async function main(): Promise<void> {
  const cluster = PG ? null : await startLogicalCluster({ shared_buffers: '256MB', max_wal_size: '4GB' });
  const admin = PG || cluster!.url;
  const tag = Date.now().toString(36);
  const names = { src: `ferry_bench_capture_src_${tag}`, dst: `ferry_bench_capture_dst_${tag}` };
  try {
    const [{ level }] = await runSql(admin, `SELECT current_setting('wal_level') AS level`);
    if (level !== 'logical') throw new Error(`--pg: the server runs wal_level=${level}; logical capture needs wal_level=logical`);
    for (const db of Object.values(names)) await runSql(admin, `CREATE DATABASE ${db}`);
    const source = databaseUrl(admin, names.src);
    process.stdout.write(`preparing pgbench scale ${SCALE}… `);
    await exec(PGBENCH, ['-i', '-s', String(SCALE), '-q', source]);
    await runSql(source, 'ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY');
    process.stdout.write('done\n');

    const env = { FERRY_CONN_SRC: source, FERRY_CONN_DST: databaseUrl(admin, names.dst) };
    const connections = new ConnectionRegistry({ env });
    const activities = createActivities({ connections, logger: silentLogger(), env });
    const act = <T>(fn: () => Promise<T>): Promise<T> => new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') }).run(fn) as Promise<T>;
    const spec = parseSpec({ id: 'bench-capture', source: 'src', target: 'dst', mode: 'online', tables: TABLES.map((t) => `public.${t}`), capture: 'logical' });
    const plan: MigrationPlan = await act(() => activities.preflight({ migrationId: 'bench-capture', spec }));
    const tables = plan.tables.map((t) => ({ index: t.index, source: t.source, keyColumns: t.keyColumns }));
    const tableList = (keysOnly: boolean) =>
      plan.tables.map((t) => quoteQualified(t.source) + (keysOnly ? ` (${t.keyColumns.map((k) => quoteIdent(k.name)).join(', ')})` : '')).join(', ');
    await runSql(source, `CREATE PUBLICATION bench_all FOR TABLE ${tableList(false)} WITH (publish = 'insert, update, delete')`);
    await runSql(source, `CREATE PUBLICATION bench_keys FOR TABLE ${tableList(true)} WITH (publish = 'insert, update, delete')`);

    const pgbench = async (): Promise<number> => {
      await runSql(source, 'CHECKPOINT'); // each run from the same start; pgbenchTps vacuums branches and tellers
      return pgbenchTps(source, CLIENTS, SECONDS);
    };
    /** The WAL sender streaming `slot`, once a consumer took it. */
    const walSender = async (slot: string): Promise<number> => {
      const deadline = Date.now() + 30_000;
      for (;;) {
        const [row] = await runSql(source, 'SELECT active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = $1', [slot]);
        if (row?.active_pid) return Number(row.active_pid);
        if (Date.now() > deadline) throw new Error(`no consumer took slot ${slot} within 30 s`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    /** pgbench while `pid`'s CPU is counted; the count ends with pgbench, before the consumer stops. */
    const pgbenchBeside = async (pid: number): Promise<{ tps: number; cpu: number }> => {
      const before = cpuSeconds(pid) ?? 0;
      const tps = await pgbench();
      return { tps, cpu: (cpuSeconds(pid) ?? before) - before };
    };

    const measure: Record<Variant, (id: string) => Promise<Measure>> = {
      none: async () => ({ tps: await pgbench(), walSenderCpu: null, consumerCpu: null, keys: null }),
      trigger: async (id) => {
        await act(() => activities.installCapture({ migrationId: id, source: 'src', tables, armFreeze: true }));
        try {
          return { tps: await pgbench(), walSenderCpu: null, consumerCpu: null, keys: null };
        } finally {
          await act(() => activities.releaseSource({ migrationId: id, source: 'src', freeze: 'remove' }));
        }
      },
      recvlogical: (id) => recvlogical(id, 'bench_all'),
      'recvlogical-keys': (id) => recvlogical(id, 'bench_keys'),
      logical: async (id) => {
        await act(() => activities.installCapture({ migrationId: id, source: 'src', tables, armFreeze: true, logical: true }));
        // The slice outlasts pgbench; it ends when the release drops its slot under it.
        const streaming = act(() => activities.streamChanges({ migrationId: id, source: 'src', tables, sliceMs: (SECONDS + 60) * 1000 })).catch(() => undefined);
        try {
          const pid = await walSender(logicalNames(id).slot);
          const consumerBefore = process.cpuUsage();
          const { tps, cpu } = await pgbenchBeside(pid);
          const consumer = process.cpuUsage(consumerBefore);
          return { tps, walSenderCpu: cpu, consumerCpu: (consumer.user + consumer.system) / 1e6, keys: await logRows(source) }; // nothing applies the logs here: all the consumer queued
        } finally {
          await act(() => activities.releaseSource({ migrationId: id, source: 'src', freeze: 'remove' }));
          await streaming;
        }
      },
    };
    async function recvlogical(id: string, publication: string): Promise<Measure> {
      const slot = `bench_${id.replace(/[^a-z0-9]/g, '_')}`;
      await runSql(source, `SELECT pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')`, [slot]);
      const child = spawn(`${BIN}/pg_recvlogical`, ['-d', source, '-S', slot, '--start', '-o', 'proto_version=1', '-o', `publication_names=${publication}`, '-f', '/dev/null']);
      try {
        const { tps, cpu } = await pgbenchBeside(await walSender(slot));
        return { tps, walSenderCpu: cpu, consumerCpu: null, keys: null };
      } finally {
        child.kill('SIGINT');
        await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
        await runSql(source, `SELECT pg_catalog.pg_drop_replication_slot($1) FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, [slot]);
      }
    }

    const results = new Map<Variant, Measure[]>(ONLY.map((v) => [v, []]));
    for (let round = 0; round < REPEAT; round += 1) {
      for (const variant of ONLY) {
        const m = await measure[variant](`bench-capture-${round}-${variant}`);
        results.get(variant)!.push(m);
        process.stdout.write(`round ${round + 1}: ${variant.padEnd(16)} ${m.tps.toFixed(0).padStart(6)} TPS\n`);
      }
    }
    await connections.close();

    const base = results.has('none') ? median(results.get('none')!.map((m) => m.tps)) : null;
    process.stdout.write(`\npgbench -c ${CLIENTS} -j 2, scale ${SCALE}, ${SECONDS} s per run, ${REPEAT} rounds in turns\n\n`);
    process.stdout.write('| | TPS (median) | against none | runs | WAL sender CPU s per 10k transactions | consumer CPU s per 10k transactions |\n| --- | --- | --- | --- | --- | --- |\n');
    for (const [variant, ms] of results) {
      const tps = median(ms.map((m) => m.tps));
      const per10k = (pick: (m: Measure) => number | null) => {
        const xs = ms.filter((m) => pick(m) !== null).map((m) => (pick(m)! / (m.tps * SECONDS)) * 10_000);
        return xs.length ? median(xs).toFixed(2) : '—';
      };
      const ratio = base ? `${(tps / base).toFixed(2)}×` : '—';
      process.stdout.write(`| ${LABELS[variant]} | ${tps.toFixed(0)} | ${ratio} | ${ms.map((m) => m.tps.toFixed(0)).join(', ')} | ${per10k((m) => m.walSenderCpu)} | ${per10k((m) => m.consumerCpu)} |\n`);
    }
    const logical = results.get('logical');
    if (logical?.length) process.stdout.write(`\nkeys Ferry's consumer queued per run: ${logical.map((m) => m.keys).join(', ')}\n`);
  } finally {
    for (const db of Object.values(names)) await runSql(admin, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
    await cluster?.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
