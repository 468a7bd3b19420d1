/**
 * `npm run bench:online` — what an online migration costs the application, on this machine.
 *
 * pgbench's tables (scale --scale, default 10; pgbench_history gets a bigserial key so it can
 * move too) are migrated online while pgbench keeps writing, through a dev server and one
 * `ferry worker` process. In one run it prints:
 *   - source TPS without capture (pgbench before the migration), with capture while the sync is
 *     paused (the triggers' own cost), and with capture while every table syncs (on this machine
 *     the sync's target writes share the source's cores), and their ratios;
 *   - the apply's capacity: the backlog pgbench's writes left in the change logs while the sync
 *     was paused, drained with nothing else writing (log rows per second), against the rate
 *     pgbench filled the logs;
 *   - the lag over the --seconds pgbench writes with the sync running since the copy, before
 *     anything is paused (--seconds 300 for five minutes): p50, p99 and worst of the age of the
 *     oldest unapplied change in the change logs on the source, and of the target's newest
 *     pgbench_history row (end to end, the slot included); the lag when approval is reached and
 *     when the cutover begins; the write outage of the cutover;
 *   - the same for --recovery seconds (60; 0 skips) right after the paused backlog drained;
 *   - the application's view of a cutover (bench/switchover.ts): pgbench writing straight at the
 *     source (the freeze ends each client at its first refused write) and through a real
 *     PgBouncer with `cutover.switch: pgbouncer`: committed and failed transactions, clients an
 *     error ended, the longest transaction, the write outage and the application's pause
 *     (--switch-seconds N of pgbench each, 30; 0 skips);
 *   - the write outage of cutovers side by side: pgbench's tables alone, with a table that has a
 *     unique secondary column and a foreign key, and the same at --outage-scale (5,000,000
 *     accounts by default): the outage should follow the rows changed, not the tables' size.
 * Figures, never assertions.
 *
 * Options: --scale N (10), --clients N (4), --seconds N (20, per pgbench measurement),
 * --validation none|count|checksum (checksum), --outage-scale N (50; 0 skips the comparison),
 * --outage-repeat N (3: runs per outage configuration, the median counts),
 * --capture auto|trigger|logical, or several comma-separated (the spec's capture, auto by
 * default; several are migrated one after another from the same source, each into its own
 * target and after a baseline of its own, and printed side by side at the end), --apply N (1: the spec's
 * parallelism.apply, sessions applying one table's changes at once), --recovery N (60), --paused N (--seconds:
 * pgbench with the sync paused, for capture's own cost and the drained backlog), --pg URL (logical capture
 * needs a server with wal_level=logical).
 *
 * With logical capture "sync paused" still runs the slot's consumer (it is not a table's sync):
 * that line is then what capture from the write-ahead log costs the source on the same machine.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { FerryClient } from '../src/client';
import { WORKER_PROCESS_ENV } from '../src/config';
import { connectionEnvVar } from '../src/core/names';
import { databaseUrl, DEFAULT_TEST_PG, ensurePostgres, runSql } from '../src/dev/postgres';
import { startDevServer } from '../src/dev/dev-server';
import * as bench from './pgbench';
import { appConnections, applicationView, printViews } from './switchover';
import { ProcessResult, startProcess } from './process';
import { cutoverTimeline } from './cutover-timeline';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const SCALE = Number(arg('--scale', '10'));
const CLIENTS = Number(arg('--clients', '4'));
const SECONDS = Number(arg('--seconds', '20'));
const ADMIN = arg('--pg', process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);
const VALIDATION = arg('--validation', 'checksum');
const OUTAGE_SCALE = Number(arg('--outage-scale', '50'));
const OUTAGE_REPEAT = Number(arg('--outage-repeat', '3'));
/** Capture modes migrated one after the other in this run, each into a target of its own. */
const CAPTURES = arg('--capture', 'auto').split(',');
const APPLY_LANES = Number(arg('--apply', '1'));
/** Seconds of pgbench with the sync running right after the paused backlog drained (0: not measured). */
const RECOVERY_SECONDS = Number(arg('--recovery', '60'));
/** Seconds of pgbench with the sync paused (capture's own cost, and the backlog the drain measures); --seconds by default. */
const PAUSED_SECONDS = Number(arg('--paused', String(SECONDS)));
const ROOT = join(__dirname, '..');
/** Seconds of pgbench in each run of the application's view (0: not measured). */
const SWITCH_SECONDS = Number(arg('--switch-seconds', '30'));

const url = (db: string) => databaseUrl(ADMIN, db);
const sql = runSql;

function run(command: string, argv: string[], env: NodeJS.ProcessEnv = process.env): { done: Promise<ProcessResult>; kill: () => void } {
  const { child, done } = startProcess(command, argv, { env });
  return { done, kill: () => child.kill('SIGINT') };
}

const PGBENCH = bench.PGBENCH;
/** pgbench's TPS over `seconds` on database `db` (bench/pgbench.ts). */
const pgbench = (db: string, seconds: number) => bench.pgbenchTps(url(db), CLIENTS, seconds);
const logRows = (db: string) => bench.logRows(url(db));
const logTables = (db: string) => bench.logTables(url(db));

/** Age in seconds of the oldest change waiting in any of the migration's logs on the source. */
async function lagSeconds(db: string): Promise<number> {
  const logs = await logTables(db);
  let worst = 0;
  for (const { t } of logs) {
    // The oldest entry by id, through the log's key (as the sync reads it): min(logged_at) would
    // scan the whole log, which after a drained backlog is mostly dead rows, and the scans of this
    // probe then weighed on the very TPS it measures beside (one 5-minute run: 131 readings, not 1,200).
    const [row] = await sql(url(db), `SELECT coalesce(extract(epoch FROM clock_timestamp() - (SELECT logged_at FROM ${t} ORDER BY id LIMIT 1)), 0)::float8 AS lag`);
    worst = Math.max(worst, Number(row.lag));
  }
  return worst;
}

/**
 * Age in seconds of the newest pgbench_history row on the target: pgbench inserts one per
 * transaction, stamped with the transaction's start, so while it writes this is how far the
 * target trails the source end to end — with logical capture including the time a change takes
 * through the slot into the logs, which the logs' own age does not show.
 */
async function targetLagSeconds(target: string): Promise<number> {
  const [row] = await sql(url(target), `SELECT coalesce(extract(epoch FROM clock_timestamp() - (SELECT mtime FROM public.pgbench_history ORDER BY id DESC LIMIT 1)), 0)::float8 AS lag`);
  return Math.max(0, Number(row.lag));
}

interface LagFigures {
  p50: number;
  p99: number;
  worst: number;
  readings: number;
}

const lagLine = (lag: LagFigures) => `p50 ${lag.p50.toFixed(2)} s, p99 ${lag.p99.toFixed(2)} s, worst ${lag.worst.toFixed(2)} s`;

function percentiles(values: number[]): LagFigures {
  const sorted = [...values].sort((a, b) => a - b);
  const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
  return { p50: pct(50), p99: pct(99), worst: pct(100), readings: values.length };
}

/**
 * pgbench for `seconds` with the sync running; meanwhile every ~250 ms the lag as the change
 * logs show it and as the target shows it.
 */
async function withSyncRun(
  source: string,
  target: string,
  seconds: number,
): Promise<{ tps: number; lag: LagFigures; targetLag: LagFigures; cpu: string; snapshots: string }> {
  await sql(ADMIN, 'CHECKPOINT');
  const measuredAt = Date.now();
  const lags: number[] = [];
  const targetLags: number[] = [];
  const cpu = new CpuUse(source, target);
  const snapshots = new OldestSnapshots();
  await cpu.sample();
  const sampling = (async () => {
    // A second for pgbench's first transactions to reach the target's reading.
    await new Promise((r) => setTimeout(r, 1000));
    while (Date.now() - measuredAt < seconds * 1000) {
      lags.push(await lagSeconds(source));
      targetLags.push(await targetLagSeconds(target));
      await cpu.sample();
      await snapshots.sample(source);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const tps = await pgbench(source, seconds);
  await sampling;
  return { tps, lag: percentiles(lags), targetLag: percentiles(targetLags), cpu: cpu.summary(), snapshots: snapshots.summary() };
}

/**
 * The oldest snapshot held on the source database at each reading (pg_stat_activity's
 * backend_xmin, by age in transactions), and whose it was: a snapshot held for long keeps vacuum
 * and HOT pruning from pgbench's dead rows, which slows every one of its transactions.
 */
class OldestSnapshots {
  private readonly ages: number[] = [];
  private worst: { age: number; who: string } = { age: 0, who: '' };

  async sample(db: string): Promise<void> {
    const [row] = (await sql(
      ADMIN,
      `SELECT age(backend_xmin)::int AS age, application_name AS app, backend_type AS kind, left(regexp_replace(query, '\\s+', ' ', 'g'), 80) AS query,
              extract(epoch FROM clock_timestamp() - xact_start)::float8 AS xact_seconds
         FROM pg_stat_activity WHERE datname = '${db}' AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
        ORDER BY age(backend_xmin) DESC LIMIT 1`,
    )) as { age: number; app: string; kind: string; query: string; xact_seconds: number | null }[];
    const age = row?.age ?? 0;
    this.ages.push(age);
    if (row && age > this.worst.age) {
      this.worst = { age, who: `${row.app || row.kind}, its transaction ${Number(row.xact_seconds ?? 0).toFixed(1)} s old: ${row.query}` };
    }
  }

  summary(): string {
    const p = percentiles(this.ages);
    return `age in transactions p50 ${p.p50.toFixed(0)}, p99 ${p.p99.toFixed(0)}, worst ${p.worst.toFixed(0)}${this.worst.who ? ` (${this.worst.who})` : ''}`;
  }
}

/**
 * CPU seconds each part of the machine used while pgbench ran, read from /proc (utime + stime)
 * at every lag reading: a process's last reading counts, so one that ended (pgbench's sessions
 * at its end) counts up to its last reading. PostgreSQL's sessions are told apart by
 * pg_stat_activity (Ferry's by their application_name, which begins with "ferry").
 */
class CpuUse {
  private readonly seen = new Map<number, { group: string; first: number; last: number }>();
  private readonly started = Date.now();
  private readonly tick = 100; // USER_HZ on Linux

  constructor(
    private readonly source: string,
    private readonly target: string,
  ) {}

  private async sessions(): Promise<Map<number, string>> {
    const rows = (await sql(ADMIN, `SELECT pid, coalesce(datname, '') AS db, application_name AS app, backend_type AS kind FROM pg_stat_activity`)) as {
      pid: number;
      db: string;
      app: string;
      kind: string;
    }[];
    const groups = new Map<number, string>();
    for (const { pid, db, app, kind } of rows) {
      const side = db === this.source ? 'source' : db === this.target ? 'target' : undefined;
      if (kind === 'walsender') groups.set(Number(pid), 'walsender (decoding)');
      else if (side && app.startsWith('ferry')) groups.set(Number(pid), `Ferry's ${side} sessions`);
      else if (side === 'source' && app === 'pgbench') groups.set(Number(pid), "pgbench's sessions");
      else if (side) groups.set(Number(pid), `other ${side} sessions`);
      else groups.set(Number(pid), 'PostgreSQL, the rest');
    }
    return groups;
  }

  private group(cmdline: string): string | undefined {
    if (cmdline.startsWith('postgres')) return 'PostgreSQL, the rest';
    if (cmdline.includes('pgbench')) return 'pgbench';
    if (/temporal\S* server start-dev/.test(cmdline)) return 'Temporal server';
    if (cmdline.includes('ferry.js worker')) return 'Ferry worker';
    return undefined;
  }

  async sample(): Promise<void> {
    const initial = this.seen.size === 0;
    const sessions = await this.sessions();
    for (const entry of readdirSync('/proc')) {
      const pid = Number(entry);
      if (!Number.isInteger(pid)) continue;
      try {
        const known = this.seen.get(pid);
        const group = sessions.get(pid) ?? known?.group ?? this.group(readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' '));
        if (!group) continue;
        const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
        const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
        if (known) {
          known.last = ticks;
          known.group = group;
        } else {
          // A process born during the run counts from zero.
          this.seen.set(pid, { group, first: initial ? ticks : 0, last: ticks });
        }
      } catch {
        // gone between the listing and the read
      }
    }
  }

  summary(): string {
    const totals = new Map<string, number>();
    for (const { group, first, last } of this.seen.values()) totals.set(group, (totals.get(group) ?? 0) + (last - first) / this.tick);
    const seconds = (Date.now() - this.started) / 1000;
    const parts = [...totals.entries()].sort((a, b) => b[1] - a[1]).map(([g, s]) => `${g} ${s.toFixed(1)}`);
    return `${parts.join(', ')} (CPU seconds in ${seconds.toFixed(0)} s on ${cpus().length} cores)`;
  }
}

/** What one capture mode's migration of pgbench's tables measured. */
interface CaptureFigures {
  capture: string;
  reason: string;
  baseline: number;
  copySeconds: number;
  lagAtApproval: number;
  captureOnly: number;
  backlog: number;
  drainSeconds: number;
  withSync: number;
  lag: LagFigures;
  targetLag: LagFigures;
  recovery?: { tps: number; lag: LagFigures; targetLag: LagFigures };
  lagAtCutover: number;
  outageMs?: number;
  state: string;
}

async function main(): Promise<void> {
  await ensurePostgres(ADMIN);
  const tag = Date.now().toString(36);
  const source = `ferry_bench_pgb_src_${tag}`;
  const targets = CAPTURES.map((capture) => `ferry_bench_pgb_tgt_${tag}_${capture}`);
  await sql(ADMIN, `CREATE DATABASE ${source}`);
  for (const target of targets) await sql(ADMIN, `CREATE DATABASE ${target}`);
  const server = await startDevServer({ headless: true });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: server.address,
    FERRY_LOG_LEVEL: 'warn',
    [connectionEnvVar('pgb_src')]: url(source),
  };
  targets.forEach((target, i) => (env[connectionEnvVar(`pgb_tgt_${i}`)] = url(target)));
  for (let n = 0; n < 3 * OUTAGE_REPEAT; n += 1) {
    env[connectionEnvVar(`out_src_${n}`)] = url(outageDatabases(n).source);
    env[connectionEnvVar(`out_tgt_${n}`)] = url(outageDatabases(n).target);
  }
  Object.assign(env, appConnections(ADMIN, tag));
  const worker = run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'worker'], { ...env, ...WORKER_PROCESS_ENV });
  const ferry = await FerryClient.connect({ address: server.address });
  try {
    process.stdout.write(`pgbench -i -s ${SCALE}… `);
    const init = await run(PGBENCH, ['-i', '-s', String(SCALE), '-q', url(source)]).done;
    if (init.code !== 0) throw new Error(init.out);
    await sql(url(source), 'ALTER TABLE public.pgbench_history ADD COLUMN id bigserial PRIMARY KEY');
    await sql(url(source), 'VACUUM ANALYZE');
    process.stdout.write('done\n');
    await pgbench(source, 5); // warm-up: caches, autovacuum after the load

    const figures: CaptureFigures[] = [];
    for (const [i, capture] of CAPTURES.entries()) {
      process.stdout.write(`\n— capture ${capture}, ${APPLY_LANES} apply lane(s) per table (parallelism.apply)\n`);
      figures.push(await captureRun(ferry, env, source, targets[i], `pgb_tgt_${i}`, capture, `${tag}-${i}`));
    }
    if (figures.length > 1) sideBySide(figures);

    if (SWITCH_SECONDS > 0) {
      // The application's view: the same cutover under pgbench straight at the source, and through PgBouncer with the switch.
      const view = { ferry, env, admin: ADMIN, root: ROOT, scale: 1, clients: CLIENTS, seconds: SWITCH_SECONDS, tag };
      printViews([await applicationView(view, false), await applicationView(view, true)]);
    }

    if (OUTAGE_SCALE > 0) {
      process.stdout.write(`\ncutover write outage under pgbench (-c ${CLIENTS}), ${VALIDATION} validation, capture ${CAPTURES[0]}:\n`);
      const runs = [
        { scale: SCALE, constraints: false },
        { scale: SCALE, constraints: true },
        { scale: OUTAGE_SCALE, constraints: true },
      ];
      // Sub-second outages vary from run to run with what the last sync round caught: each
      // configuration runs --outage-repeat times (fresh databases each time) and its median counts.
      const outages: number[] = [];
      let n = 0;
      for (const r of runs) {
        const label = `${(r.scale * 100_000).toLocaleString('en')} accounts${r.constraints ? ' + users (unique email, foreign key)' : ''}`;
        const each: number[] = [];
        for (let i = 0; i < OUTAGE_REPEAT; i++) {
          const { outageMs, timeline } = await outageRun(ferry, n++, r.scale, r.constraints);
          each.push(outageMs);
          process.stdout.write(`    ${label}, run ${i + 1}: ${outageMs} ms (${timeline})\n`);
        }
        outages.push(median(each));
        process.stdout.write(`  ${label}: median ${median(each)} ms of ${each.join(', ')}\n`);
      }
      process.stdout.write(`  with/without unique + foreign key: ${(outages[1] / outages[0]).toFixed(2)} ×;  ${OUTAGE_SCALE / SCALE}× the rows: ${(outages[2] / outages[1]).toFixed(2)} ×\n`);
    }
  } finally {
    await ferry.close();
    worker.kill();
    await worker.done;
    await server.stop();
    for (const db of [source, ...targets]) await sql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

/**
 * pgbench's tables migrated online with `capture` into `target` (connection `targetName`) while
 * pgbench writes, the source's TPS measured just before: each mode is compared with a baseline
 * of its own minutes, since pgbench's TPS drifts here by more than the effects measured. The
 * migration unfreezes the source when it ends, so the next mode migrates the same source.
 */
async function captureRun(ferry: FerryClient, env: NodeJS.ProcessEnv, source: string, target: string, targetName: string, capture: string, tag: string): Promise<CaptureFigures> {
  await sql(ADMIN, 'CHECKPOINT');
  const baseline = await pgbench(source, SECONDS);
  process.stdout.write(`source TPS without capture:          ${baseline.toFixed(0)}  (pgbench -c ${CLIENTS}, ${SECONDS} s)\n`);

  const spec = join(tmpdir(), `ferry-bench-online-${tag}.json`);
  writeFileSync(
    spec,
    JSON.stringify({
      id: `bench-online-${tag}`,
      source: 'pgb_src',
      target: targetName,
      mode: 'online',
      validation: VALIDATION,
      capture,
      parallelism: { apply: APPLY_LANES },
      cutover: { approval: 'manual', approvalTimeout: '30m', afterwards: 'unfreeze' },
      tables: ['public.pgbench_accounts', 'public.pgbench_branches', 'public.pgbench_tellers', 'public.pgbench_history'],
    }),
  );
  // Writers during the whole copy, as an application would keep writing.
  const background = run(PGBENCH, ['-n', '-c', String(CLIENTS), '-j', '2', '-T', '3600', url(source)]);
  const started = run(process.execPath, [join(ROOT, 'bin', 'ferry.js'), 'start', spec, '--json'], env);
  const startOut = await started.done;
  if (startOut.code !== 0) throw new Error(`ferry start failed: ${startOut.out}`);
  const startedDoc = JSON.parse(startOut.stdout) as { id: string; plan?: { capture?: { mode: string; reason: string } } };
  const id = startedDoc.id;
  const mode = startedDoc.plan?.capture?.mode ?? '?';
  const reason = startedDoc.plan?.capture?.reason ?? '';
  process.stdout.write(`capture:                             ${mode} (${reason})\n`);
  const t0 = Date.now();
  for (;;) {
    const s = await ferry.status(id);
    if (s.endedAt) throw new Error(`migration ended early: ${JSON.stringify(s.error)}`);
    if (s.phase === 'AWAITING_APPROVAL') break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const copySeconds = (Date.now() - t0) / 1000;
  const lagAtApproval = await lagSeconds(source);
  process.stdout.write(`copy + catch-up under load:          ${copySeconds.toFixed(1)} s to AWAITING_APPROVAL\n`);
  process.stdout.write(`lag when approval was reached:       ${lagAtApproval.toFixed(2)} s\n`);
  background.kill();
  await background.done;

  // Steady state first: the sync running since the copy, pgbench writing, nothing paused. This
  // is the lag an application sees during a migration.
  const steady = await withSyncRun(source, target, SECONDS);
  process.stdout.write(`source TPS with capture and sync:    ${steady.tps.toFixed(0)}  → ${(steady.tps / baseline).toFixed(2)} × without (sync shares these 2 cores)\n`);
  process.stdout.write(`lag while pgbench ran:               ${lagLine(steady.lag)} (oldest key waiting in the change logs, ${steady.lag.readings} readings over ${SECONDS} s)\n`);
  process.stdout.write(`lag at the target:                   ${lagLine(steady.targetLag)} (age of the target's newest pgbench_history row)\n`);
  process.stdout.write(`CPU while pgbench ran with the sync: ${steady.cpu}\n`);
  process.stdout.write(`oldest snapshot on the source:       ${steady.snapshots}\n`);

  // Capture alone (the triggers, or the slot's consumer), with the sync paused: what the
  // application pays when the target and Ferry's workers run on other machines.
  await ferry.pause(id);
  await new Promise((r) => setTimeout(r, 3000));
  await sql(ADMIN, 'CHECKPOINT');
  const captureOnly = await pgbench(source, PAUSED_SECONDS);
  process.stdout.write(`source TPS with capture, sync paused: ${captureOnly.toFixed(0)}  → ${(captureOnly / baseline).toFixed(2)} × without\n`);
  // The apply's capacity: the backlog the paused sync left (the log rows pgbench's writes made
  // while it ran), drained with nothing else writing, against the rate pgbench made it.
  const backlog = await logRows(source);
  await ferry.resume(id);
  const drainStarted = Date.now();
  while ((await logRows(source)) > 0) {
    if (Date.now() - drainStarted > 600_000) throw new Error('the sync did not drain the paused backlog within 10 minutes');
    await new Promise((r) => setTimeout(r, 100));
  }
  const drainSeconds = (Date.now() - drainStarted) / 1000;
  const changeRate = backlog / PAUSED_SECONDS;
  const applyCapacity = backlog / drainSeconds;
  process.stdout.write(
    `apply capacity:                      ${applyCapacity.toFixed(0)} log rows/s (a backlog of ${backlog} drained in ${drainSeconds.toFixed(1)} s)` +
      ` against ${changeRate.toFixed(0)} logged/s while pgbench ran → ${(applyCapacity / changeRate).toFixed(2)} ×\n`,
  );

  // Right after the drained backlog (the logs and pgbench's tables full of dead rows): how
  // the source and the lag fare while that is cleaned up.
  const recovery = RECOVERY_SECONDS > 0 ? await withSyncRun(source, target, RECOVERY_SECONDS) : undefined;
  if (recovery) {
    process.stdout.write(`after the drain: TPS with sync        ${recovery.tps.toFixed(0)}  → ${(recovery.tps / baseline).toFixed(2)} × without; lag ${lagLine(recovery.lag)}, at the target ${lagLine(recovery.targetLag)} (${RECOVERY_SECONDS} s)\n`);
    process.stdout.write(`after the drain: CPU                 ${recovery.cpu}\n`);
    process.stdout.write(`after the drain: oldest snapshot     ${recovery.snapshots}\n`);
  }
  const slot = (await ferry.status(id)).capture;
  if (slot) process.stdout.write(`slot lag after the measurement:      ${slot.slotLagBytes} bytes, ${slot.slotLagSeconds} s since the consumer's last confirmation\n`);

  const tail = run(PGBENCH, ['-n', '-c', String(CLIENTS), '-j', '2', '-T', '3600', url(source)]);
  await new Promise((r) => setTimeout(r, 3000));
  const lagAtCutover = await lagSeconds(source);
  await ferry.approve(id);
  const result = await ferry.result(id);
  tail.kill();
  await tail.done;
  process.stdout.write(`lag when the cutover began:          ${lagAtCutover.toFixed(2)} s\n`);
  process.stdout.write(`write outage (freeze → cut over):    ${result.cutover ? `${result.cutover.writeOutageMs} ms` : 'n/a'}  (${result.state})\n`);
  const [rows] = await sql(url(target), 'SELECT count(*)::int AS n FROM public.pgbench_history');
  process.stdout.write(`pgbench_history rows on the target:  ${rows.n}\n`);
  return {
    capture: mode,
    reason,
    baseline,
    copySeconds,
    lagAtApproval,
    captureOnly,
    backlog,
    drainSeconds,
    withSync: steady.tps,
    lag: steady.lag,
    targetLag: steady.targetLag,
    recovery,
    lagAtCutover,
    outageMs: result.cutover?.writeOutageMs,
    state: result.state,
  };
}

/** The modes' figures in one table, a column each. */
function sideBySide(figures: CaptureFigures[]): void {
  const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  const rows: [string, (f: CaptureFigures) => string][] = [
    ['source TPS without capture (just before)', (f) => f.baseline.toFixed(0)],
    ['with capture, sync paused', (f) => `${f.captureOnly.toFixed(0)} (${ratio(f.captureOnly, f.baseline)})`],
    ['with capture and the sync on the same cores (steady, before any pause)', (f) => `${f.withSync.toFixed(0)} (${ratio(f.withSync, f.baseline)})`],
    ['capture, as preflight chose it', (f) => f.reason || f.capture],
    ['copy + catch-up to AWAITING_APPROVAL', (f) => `${f.copySeconds.toFixed(1)} s`],
    ['lag when approval was reached', (f) => `${f.lagAtApproval.toFixed(2)} s`],
    [
      'apply capacity against the logging rate',
      (f) => `${(f.backlog / f.drainSeconds).toFixed(0)} against ${(f.backlog / PAUSED_SECONDS).toFixed(0)} rows/s (${ratio(PAUSED_SECONDS, f.drainSeconds)})`,
    ],
    ['lag while pgbench ran: p50 / p99 / worst', (f) => `${f.lag.p50.toFixed(2)} / ${f.lag.p99.toFixed(2)} / ${f.lag.worst.toFixed(2)} s (${f.lag.readings} readings)`],
    ['lag at the target (newest pgbench_history row): p50 / p99 / worst', (f) => `${f.targetLag.p50.toFixed(2)} / ${f.targetLag.p99.toFixed(2)} / ${f.targetLag.worst.toFixed(2)} s`],
    [
      `after the drained backlog (${RECOVERY_SECONDS} s): TPS; lag p50 / p99 / worst`,
      (f) => (f.recovery ? `${f.recovery.tps.toFixed(0)} (${ratio(f.recovery.tps, f.baseline)}); logs ${f.recovery.lag.p50.toFixed(2)} / ${f.recovery.lag.p99.toFixed(2)} / ${f.recovery.lag.worst.toFixed(2)} s, target ${f.recovery.targetLag.p50.toFixed(2)} / ${f.recovery.targetLag.p99.toFixed(2)} / ${f.recovery.targetLag.worst.toFixed(2)} s` : 'not measured'),
    ],
    ['lag when the cutover began', (f) => `${f.lagAtCutover.toFixed(2)} s`],
    ['write outage', (f) => (f.outageMs === undefined ? `n/a (${f.state})` : `${f.outageMs} ms`)],
  ];
  process.stdout.write(`\nside by side (${SECONDS} s per pgbench measurement, ${PAUSED_SECONDS} s paused, -c ${CLIENTS}, ${APPLY_LANES} apply lane(s)):\n`);
  process.stdout.write(`| | ${figures.map((f) => f.capture).join(' | ')} |\n| --- |${figures.map(() => ' --- |').join('')}\n`);
  for (const [label, cell] of rows) process.stdout.write(`| ${label} | ${figures.map(cell).join(' | ')} |\n`);
}

/**
 * One online migration of pgbench's tables at `scale` (plus, with `constraints`, teams and users:
 * a unique e-mail and a foreign key) under pgbench, approved once ready: its write outage.
 */
async function outageRun(ferry: FerryClient, n: number, scale: number, constraints: boolean): Promise<{ outageMs: number; timeline: string }> {
  const { source, target } = outageDatabases(n);
  const tag = `${n}_${scale}${constraints ? 'c' : ''}`;
  await sql(ADMIN, `CREATE DATABASE ${source}`);
  await sql(ADMIN, `CREATE DATABASE ${target}`);
  try {
    const init = await run(PGBENCH, ['-i', '-s', String(scale), '-q', '-I', 'dtgvp', url(source)]).done;
    if (init.code !== 0) throw new Error(init.out);
    const tables = ['public.pgbench_accounts', 'public.pgbench_branches', 'public.pgbench_tellers'];
    if (constraints) {
      await sql(
        url(source),
        `CREATE TABLE public.teams (id int PRIMARY KEY, name text NOT NULL);
         INSERT INTO public.teams SELECT g, 'team ' || g FROM generate_series(1, 1000) g;
         CREATE TABLE public.users (id bigint PRIMARY KEY, email text NOT NULL UNIQUE, team_id int NOT NULL REFERENCES public.teams (id));
         INSERT INTO public.users SELECT g, 'user' || g || '@example.com', 1 + g % 1000 FROM generate_series(1, ${scale * 20_000}) g;
         ANALYZE`,
      );
      tables.push('public.teams', 'public.users');
    }
    const id = `bench-outage-${tag}`.replace(/_/g, '-');
    const load = run(PGBENCH, ['-n', '-c', String(CLIENTS), '-j', '2', '-T', '3600', url(source)]);
    try {
      await ferry.start(
        { id, source: `out_src_${n}`, target: `out_tgt_${n}`, mode: 'online', validation: VALIDATION, capture: CAPTURES[0], parallelism: { apply: APPLY_LANES }, tables, cutover: { approval: 'manual', approvalTimeout: '1h' } },
        {},
      );
      for (;;) {
        const s = await ferry.status(id);
        if (s.endedAt) throw new Error(`migration ended early: ${JSON.stringify(s.error)}`);
        if (s.phase === 'AWAITING_APPROVAL') break;
        await new Promise((r) => setTimeout(r, 500));
      }
      await new Promise((r) => setTimeout(r, 3000)); // steady sync under load
      await ferry.approve(id);
      const result = await ferry.result(id);
      if (result.state !== 'SUCCEEDED') throw new Error(`outage run ${id} ended ${result.state}: ${JSON.stringify(result.error)}`);
      return { outageMs: result.cutover!.writeOutageMs, timeline: await cutoverTimeline(ferry, id) };
    } finally {
      load.kill();
      await load.done;
    }
  } finally {
    for (const db of [source, target]) await sql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : Math.round((sorted[mid - 1] + sorted[mid]) / 2);
}

/** The databases of outage run n, known before the worker starts (it resolves every connection from its environment). */
const BENCH_TAG = Date.now().toString(36);
function outageDatabases(n: number): { source: string; target: string } {
  return { source: `ferry_bench_out_src_${BENCH_TAG}_${n}`, target: `ferry_bench_out_tgt_${BENCH_TAG}_${n}` };
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
