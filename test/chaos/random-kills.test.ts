/**
 * Random SIGKILLs: a pool of two `ferry worker` processes runs small migrations, full-load and
 * online (under live writers, auto approval), trial after trial. In each trial one worker is
 * SIGKILLed at a random moment — chosen by a seeded PRNG, so a failing trial can be rerun — and
 * a replacement starts at once. Every trial must end SUCCEEDED with the target equal to the
 * source row for row (SQL on both databases: nothing missing, nothing extra, no duplicate key),
 * and an online trial must leave the source frozen or unfrozen as its spec says, with no capture
 * trigger left.
 *
 * The moment is random; the victim is the worker running one of the migration's activities at
 * that moment when there is one (a kill that hits nothing tests nothing), else either worker.
 * Trials run in four lanes at once — each mode's trials split in two — each lane with its own
 * task queue and its own pool of two workers: most of a trial's time is spent waiting out a
 * heartbeat timeout (20 s for copy and sync slices, a minute for the steps and validation), and
 * that waiting overlaps.
 *
 *   FERRY_CHAOS_TRIALS=N   trials per mode (default 10)
 *   FERRY_CHAOS_SEED=S     replay a run (the seed is printed)
 *   FERRY_CHAOS_ONLY=online:3   run just that trial of that seed
 *   FERRY_CHAOS_WINDOW_MS=T     draw kill moments from [0, T) instead
 */
import { FerryClient } from '../../src/client';
import { compareTable, chaosSeed, ferryTriggers, ledgerSql, prng, snapshotWork, sleep, trialSeed, WorkSnapshot } from '../helpers/chaos';
import { objectInventory, TestDatabases } from '../helpers/databases';
import { diagnose, resultWithin, RunningProcessWorker, TestStack } from '../helpers/stack';
import { startWriters } from '../helpers/writers';

type Mode = 'full' | 'online';
interface Lane {
  name: string;
  mode: Mode;
  trials: number[];
}

const TRIALS = Number(process.env.FERRY_CHAOS_TRIALS || 10);
const SEED = chaosSeed();
const ONLY = process.env.FERRY_CHAOS_ONLY;
/** Kill moments are drawn from [0, window) after `ferry start` is called: about one undisturbed run. */
const WINDOW = Number(process.env.FERRY_CHAOS_WINDOW_MS) || undefined;
const KILL_WINDOW_MS: Record<Mode, number> = { full: WINDOW ?? 2_500, online: WINDOW ?? 4_000 };
const WRITERS = 2;

const FULL_SOURCE = `
${ledgerSql(60000)}
CREATE TABLE public.lines (sku text, n int, qty int NOT NULL, PRIMARY KEY (sku, n));
INSERT INTO public.lines SELECT 'sku-' || (g % 97), g, g % 13 FROM generate_series(1, 8000) g;
ANALYZE;`;
const FULL_TABLES: [string, string][] = [
  ['public.ledger', 'id'],
  ['public.lines', 'sku, n'],
];

const ONLINE_SOURCE = `
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12,2), note text);
INSERT INTO public.accounts SELECT g, g / 10.0, 'seed ' || g FROM generate_series(1, 20000) g;
CREATE TABLE public.items (a int, b text, v int NOT NULL, PRIMARY KEY (a, b));
INSERT INTO public.items SELECT g % 40, 'k' || g, 0 FROM generate_series(1, 4000) g;
ANALYZE;`;
const ONLINE_TABLES: [string, string][] = [
  ['public.accounts', 'id'],
  ['public.items', 'a, b'],
];

interface KillRecord {
  mode: Mode;
  trial: number;
  atMs: number;
  victim: string;
  snapshot: WorkSnapshot;
  victimActivities: string[];
}

const kills: KillRecord[] = [];
const passed: Record<Mode, number> = { full: 0, online: 0 };

const trials = (mode: Mode, parity: number) =>
  Array.from({ length: TRIALS }, (_, i) => i).filter((i) => i % 2 === parity && (!ONLY || ONLY === `${mode}:${i}`));
const LANES: Lane[] = [
  { name: 'full-a', mode: 'full', trials: trials('full', 0) },
  { name: 'full-b', mode: 'full', trials: trials('full', 1) },
  { name: 'online-a', mode: 'online', trials: trials('online', 0) },
  { name: 'online-b', mode: 'online', trials: trials('online', 1) },
];

describe('workers SIGKILLed at random moments', () => {
  let dbs: TestDatabases;
  let stack: TestStack;
  const pools: Record<string, RunningProcessWorker[]> = {};
  const ferries: Record<string, FerryClient> = {};
  const laneEnv: Record<string, Record<string, string>> = {};
  let spawned = 0;

  beforeAll(async () => {
    console.log(`random-kills: seed ${SEED} (rerun with FERRY_CHAOS_SEED=${SEED}), ${TRIALS} trial(s) per mode`);
    const roles = ['full_source'];
    for (let i = 0; i < TRIALS; i += 1) roles.push(`full_target_${i}`, `online_source_${i}`, `online_target_${i}`);
    dbs = await TestDatabases.create('rkill', roles);
    await dbs.exec('full_source', FULL_SOURCE);
    const connections: Record<string, string> = { fsrc: dbs.url('full_source') };
    for (let i = 0; i < TRIALS; i += 1) {
      connections[`ftgt${i}`] = dbs.url(`full_target_${i}`);
      connections[`osrc${i}`] = dbs.url(`online_source_${i}`);
      connections[`otgt${i}`] = dbs.url(`online_target_${i}`);
    }
    stack = await TestStack.start({ connections, workers: 0 });
    const lanes = LANES.filter((l) => l.trials.length > 0);
    for (const { name } of lanes) {
      const taskQueue = `${stack.taskQueue}-${name}`;
      laneEnv[name] = { FERRY_TASK_QUEUE: taskQueue };
      ferries[name] = FerryClient.fromClient(stack.client, { address: stack.server.address, taskQueue });
      pools[name] = [];
    }
    await Promise.all(lanes.flatMap(({ name }) => [0, 1].map(async () => pools[name].push(await startWorker(name)))));
  }, 120_000);

  afterAll(async () => {
    const byPhase = new Map<string, number>();
    for (const k of kills) byPhase.set(k.snapshot.phase, (byPhase.get(k.snapshot.phase) ?? 0) + 1);
    const busy = kills.filter((k) => k.victimActivities.length > 0).length;
    const lost = new Map<string, number>();
    for (const a of kills.flatMap((k) => k.victimActivities)) lost.set(a.replace(/#\d+$/, ''), (lost.get(a.replace(/#\d+$/, '')) ?? 0) + 1);
    const list = (m: Map<string, number>) => [...m].map(([k, n]) => `${k} ${n}`).join(', ') || 'none';
    console.log(
      `random-kills summary: ${passed.full + passed.online} trial(s) passed (${passed.full} full, ${passed.online} online), ` +
        `${kills.length} SIGKILL(s), ${busy} of them while the victim ran activities (${list(lost)}); ` +
        `phases at kill: ${list(byPhase)}; seed ${SEED}`,
    );
    await stack?.teardown();
    await dbs?.drop();
  });

  function startWorker(lane: string): Promise<RunningProcessWorker> {
    spawned += 1;
    return stack.startWorkerProcessReady(`${lane}-w${spawned}`, [], laneEnv[lane]);
  }

  /** Waits `atMs`, snapshots the migration, SIGKILLs one worker of the lane and starts its replacement. */
  async function killAt(lane: Lane, trial: number, atMs: number, rand: () => number, migrationId: string, started: () => boolean): Promise<KillRecord> {
    await sleep(atMs);
    const snapshot = await snapshotWork(ferries[lane.name], migrationId, started()).catch(
      (err: Error): WorkSnapshot => ({ phase: `UNKNOWN (${err.message})`, tablePhases: [], running: [] }),
    );
    const pool = pools[lane.name];
    const busy = pool.filter((w) => snapshot.running.some((a) => a.worker === w.identity));
    const candidates = busy.length > 0 ? busy : pool;
    const victim = candidates[Math.floor(rand() * candidates.length)];
    victim.process.kill('SIGKILL');
    await victim.exited;
    pool.splice(pool.indexOf(victim), 1, await startWorker(lane.name));
    const record: KillRecord = {
      mode: lane.mode,
      trial,
      atMs,
      victim: victim.identity,
      snapshot,
      victimActivities: snapshot.running.filter((a) => a.worker === victim.identity).map((a) => `${a.activity}#${a.attempt}`),
    };
    kills.push(record);
    return record;
  }

  async function runTrial(lane: Lane, trial: number): Promise<void> {
    const { mode } = lane;
    const rand = prng(trialSeed(SEED, mode, trial));
    const atMs = Math.floor(rand() * KILL_WINDOW_MS[mode]);
    const afterwards = rand() < 0.5 ? 'keep-frozen' : 'unfreeze';
    const ferry = ferries[lane.name];
    const source = mode === 'full' ? 'full_source' : `online_source_${trial}`;
    const target = `${mode}_target_${trial}`;
    const tables = mode === 'full' ? FULL_TABLES : ONLINE_TABLES;
    const spec =
      mode === 'full'
        ? { source: 'fsrc', target: `ftgt${trial}`, batchRows: 1000, tables: [{ name: 'public.ledger', chunks: 3 }, { name: 'public.lines', chunks: 2 }] }
        : {
            source: `osrc${trial}`,
            target: `otgt${trial}`,
            mode: 'online',
            batchRows: 1000,
            tables: [{ name: 'public.accounts', chunks: 2 }, 'public.items'],
            cutover: { approval: 'auto', afterwards },
          };
    const label = `[${mode} ${trial + 1}/${TRIALS}${mode === 'online' ? ` ${afterwards}` : ''}]`;
    const rerun = `FERRY_CHAOS_SEED=${SEED} FERRY_CHAOS_ONLY=${mode}:${trial}`;

    let inventoryBefore: string[] = [];
    if (mode === 'online') {
      await dbs.exec(source, ONLINE_SOURCE);
      inventoryBefore = await objectInventory(dbs, source);
    }
    const writers = mode === 'online' ? await startWriters(dbs.url(source), WRITERS) : undefined;
    const t0 = Date.now();
    const id = `rkill-${mode}-${trial}-${SEED}`;
    let started = false;
    const kill = killAt(lane, trial, atMs, rand, id, () => started);
    try {
      await ferry.start(spec, { id });
      started = true;
      const result = await resultWithin(ferry, id, 300_000).catch(async (err: Error) => {
        throw new Error(`${label} ${rerun}: ${err.message}`);
      });
      const k = await kill;
      await writers?.stop();
      console.log(
        `${label} killed ${k.victim} at ${(k.atMs / 1000).toFixed(1)}s in ${k.snapshot.phase} ` +
          `(tables ${k.snapshot.tablePhases.join('/') || '-'}; it ran ${k.victimActivities.join(', ') || 'no activity'}) → ` +
          `${result.state} after ${((Date.now() - t0) / 1000).toFixed(1)}s`,
      );
      const context = `${label} ${rerun}; killed ${k.victim} in ${k.snapshot.phase}`;
      if (result.state !== 'SUCCEEDED') throw new Error(`${context}: ${result.state} ${JSON.stringify(result.error)}\n${await diagnose(ferry, id)}`);

      for (const [table, key] of tables) {
        const cmp = await compareTable(dbs, source, target, table, key);
        if (!cmp.equal || cmp.duplicateKeys > 0) throw new Error(`${context}: ${table} differs: ${JSON.stringify(cmp)}`);
        if (mode === 'full') {
          // Checkpoints counted every committed row exactly once, across the kill.
          const copied = result.tables.find((t) => t.source === table)?.rowsCopied;
          if (copied !== cmp.sourceRows) throw new Error(`${context}: ${table} rowsCopied ${copied}, source has ${cmp.sourceRows}`);
        }
      }
      if (mode === 'online') {
        if (writers!.stats.otherErrors.length > 0) throw new Error(`${context}: writers failed: ${writers!.stats.otherErrors.slice(0, 3).join('; ')}`);
        // Every writer was stopped by the freeze, so the source cannot have changed after cutover.
        if (writers!.stats.frozenErrors.length !== WRITERS) {
          throw new Error(`${context}: only ${writers!.stats.frozenErrors.length} of ${WRITERS} writers met the freeze`);
        }
        // What the migration left on the source, against what was there before it.
        const after = await objectInventory(dbs, source);
        const added = after.filter((o) => !inventoryBefore.includes(o)).map((o) => o.replace(/_[0-9a-f]{12}(?=( [a-zA-Z])?$)/, ''));
        const removed = inventoryBefore.filter((o) => !after.includes(o));
        const triggers = await ferryTriggers(dbs, source);
        const left = JSON.stringify({ triggers, added, removed });
        const expected =
          afterwards === 'keep-frozen'
            ? {
                triggers: ['accounts:ferry_freeze', 'items:ferry_freeze'],
                // The freeze installed with capture: its trigger function and its state.
                added: ['function _ferry_freeze.freeze', 'relation _ferry_freeze.freeze_state S', 'schema _ferry_freeze', 'trigger ferry_freeze', 'trigger ferry_freeze'],
                removed: [],
              }
            : { triggers: [], added: [], removed: [] };
        if (left !== JSON.stringify(expected)) throw new Error(`${context}: the source was left with ${left}, expected ${JSON.stringify(expected)}`);
        if (afterwards === 'keep-frozen') {
          const write = await dbs.exec(source, 'DELETE FROM public.items').then(() => 'accepted', (err: Error) => err.message);
          if (!/frozen/.test(write)) throw new Error(`${context}: a write to the kept-frozen source was ${write}`);
        }
      }
      passed[mode] += 1;
    } finally {
      await writers?.stop();
      await kill.catch(() => undefined);
    }
  }

  async function runLane(lane: Lane): Promise<void> {
    for (const trial of lane.trials) await runTrial(lane, trial);
  }

  it('full-load and online migrations survive a worker killed at a random moment, every trial, with the target equal to the source', async () => {
    const lanes = await Promise.allSettled(LANES.map(runLane));
    const failures = lanes.filter((l): l is PromiseRejectedResult => l.status === 'rejected').map((l) => l.reason as Error);
    if (failures.length > 0) throw new Error(failures.map((f) => f.stack ?? f.message).join('\n\n'));
    expect(kills.length).toBe(ONLY ? 1 : 2 * TRIALS);
  }, 1_800_000);
});
