/**
 * SIGKILLs that land: a pool of two `ferry worker` processes runs small migrations, full-load and
 * online (under live writers, auto approval), trial after trial. Each trial takes one activity
 * of the migration in turn —
 *   full:   preflight, prepareTarget, copyChunk, validation, buildIndex
 *   online: preflight, installCapture, copyChunk, syncChanges, buildIndex, awaitWriters
 * — keeps it busy long enough to be hit (a lock held by the test, a throttle, a write
 * transaction left open across the freeze), waits until it runs on a worker and has heartbeated
 * in its current attempt (a copyChunk: the worker whose attempt owns the chunk's checkpoint
 * row), waits a random moment more, and SIGKILLs that worker; a replacement starts at once.
 *
 * Every kill must then be survived as designed: the killed attempt ends in a heartbeat timeout,
 * the next attempt of the same activity completes on another worker (read from Temporal), and
 * the trial ends SUCCEEDED with the target equal to the source row for row (SQL on both
 * databases: nothing missing, nothing extra, no duplicate key); an online trial must leave the
 * source frozen or unfrozen as its spec says, with no capture trigger left. A kill that finds
 * its activity gone (it finished first, before the look that precedes the kill or in the moment
 * between that look and the kill) is not counted: the trial looks again.
 *
 * Trials run in four lanes at once — each mode's trials split in two — each lane with its own
 * task queue and its own pool of two workers: most of a trial's time is spent waiting out the
 * heartbeat timeout (8 s in the tests, TEST_TIMINGS), and that waiting overlaps.
 *
 *   FERRY_CHAOS_TRIALS=N   trials per mode (default 1 in `npm test`, 6 in `npm run test:soak`; with 6 or more every activity above is hit)
 *   FERRY_CHAOS_SEED=S     replay a run (the seed is printed): the same activity per trial, the same spec
 *   FERRY_CHAOS_ONLY=online:3   run just that trial of that seed (or a list: full:1,online:3)
 */
import { CAPTURE_LOCK } from '../../src/db/capture-install';
import { FerryClient } from '../../src/client';
import { BOOKKEEPING_LOCK } from '../../src/db/bookkeeping';
import { chaosSeed, compareTable, ferryTriggers, ledgerSql, preflightHelpers, prng, runningActivities, RunningActivity, sleep, trialSeed } from '../helpers/chaos';
import { objectInventory } from '../helpers/databases';
import { copiedAndApplied, repairsFound } from '../helpers/repairs';
import { awaitRetry, finishedBeforeKill, HeldLock, Killed, lastAttempt, Retry } from '../helpers/kills';
import { diagnose, eventually, resultWithin, RunningProcessWorker, TEST_TIMINGS } from '../helpers/stack';
import { stackSuite, SuiteServer } from '../helpers/suite';
import { startWriters } from '../helpers/writers';

type Mode = 'full' | 'online';
type Kind = 'preflight' | 'prepareTarget' | 'installCapture' | 'copyChunk' | 'validation' | 'syncChanges' | 'buildIndex' | 'awaitWriters';
interface Lane {
  name: string;
  mode: Mode;
  trials: number[];
}

/**
 * The suite, `defaultTrials` per mode unless FERRY_CHAOS_TRIALS says otherwise: the fast tier
 * (test/chaos/random-kills.test.ts) runs one, the soak tier (test/soak/random-kills.test.ts) six.
 * `server` puts its databases on a server of the suite's own (the soak tier's: its eight worker
 * processes, beside the tier's other suite on the shared server, took that past
 * max_connections — "sorry, too many clients already").
 */
export function randomKillsSuite(defaultTrials: number, server?: () => Promise<SuiteServer>): void {
  // One per mode in `npm test` (every activity of a menu over successive runs), six in the soak
  // tier (every activity of both menus is hit once or more in each run); FERRY_CHAOS_TRIALS=50
  // for a longer run.
  const TRIALS = Number(process.env.FERRY_CHAOS_TRIALS || defaultTrials);
  const SEED = chaosSeed();
  /** Trials to run alone, e.g. `online:3` or `full:1,online:2` (of the seed's run). */
  const ONLY = process.env.FERRY_CHAOS_ONLY ? process.env.FERRY_CHAOS_ONLY.split(',') : undefined;
  const WRITERS = 2;

  const MENU: Record<Mode, Kind[]> = {
    full: ['preflight', 'prepareTarget', 'copyChunk', 'validation', 'buildIndex'],
    online: ['preflight', 'installCapture', 'copyChunk', 'syncChanges', 'buildIndex', 'awaitWriters'],
  };
  /**
   * The activities a kind stands for: a table's validation is the sum of its sides' shares of blocks
   * (checksumBlocks) when it has several chunks, a key range compared on both sides (validateChunk)
   * otherwise and for a repair.
   */
  const activitiesOf = (kind: Kind): string[] => (kind === 'validation' ? ['checksumBlocks', 'validateChunk'] : [kind]);
  /** The kind of a trial: the menu in turn, from an offset the run's seed picks. */
  const kindOf = (mode: Mode, trial: number): Kind => MENU[mode][(SEED + trial) % MENU[mode].length];
  /**
   * How long after its activity is seen running a kill may wait: less than the hold keeps it
   * running (a 5 s lock_timeout; installCapture's is 2 s; an open write, as long as it stays open).
   */
  const MAX_DELAY_MS: Record<Kind, number> = {
    preflight: 1500,
    prepareTarget: 1500,
    installCapture: 700,
    copyChunk: 1500,
    validation: 1500,
    syncChanges: 1500,
    buildIndex: 1500,
    awaitWriters: 3000,
  };

  const FULL_SOURCE = `
  ${ledgerSql(60000)}
  CREATE TABLE public.lines (sku text, n int, qty int NOT NULL, PRIMARY KEY (sku, n));
  INSERT INTO public.lines SELECT 'sku-' || (g % 97), g, g % 13 FROM generate_series(1, 8000) g;
  CREATE INDEX lines_qty ON public.lines (qty);
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
  CREATE INDEX items_v ON public.items (v);
  ANALYZE;`;
  const ONLINE_TABLES: [string, string][] = [
    ['public.accounts', 'id'],
    ['public.items', 'a, b'],
  ];
  /** The table whose secondary index the buildIndex trials hold up, per mode. */
  const INDEXED: Record<Mode, string> = { full: 'public.lines', online: 'public.items' };
  /** A row the writers never touch (their keys are 1–5000 and new ones from 10,000,000). */
  const HELD_ROW = 19_999;
  /** The seeded accounts no writer touches (5,001–20,000); HELD_ROW among them, changed by the awaitWriters hold. */
  const UNTOUCHED_ACCOUNTS = 15_000;

  interface KillRecord {
    mode: Mode;
    trial: number;
    kind: Kind;
    killed: Killed;
    delayMs: number;
    retry: Retry;
    last: { attempt: number; worker: string; completed: boolean };
  }

  const kills: KillRecord[] = [];
  const passed: Record<Mode, number> = { full: 0, online: 0 };

  const trials = (mode: Mode, parity: number) =>
    Array.from({ length: TRIALS }, (_, i) => i).filter((i) => i % 2 === parity && (!ONLY || ONLY.includes(`${mode}:${i}`)));
  const LANES: Lane[] = [
    { name: 'full-a', mode: 'full', trials: trials('full', 0) },
    { name: 'full-b', mode: 'full', trials: trials('full', 1) },
    { name: 'online-a', mode: 'online', trials: trials('online', 0) },
    { name: 'online-b', mode: 'online', trials: trials('online', 1) },
  ];

  describe('workers SIGKILLed while they run a chosen activity', () => {
    const pools: Record<string, RunningProcessWorker[]> = {};
    const ferries: Record<string, FerryClient> = {};
    const laneEnv: Record<string, Record<string, string>> = {};
    let spawned = 0;

    // Before the suite's set-up and before its teardown (jest runs hooks in the order they are declared).
    beforeAll(() => {
      console.log(`random-kills: seed ${SEED} (rerun with FERRY_CHAOS_SEED=${SEED}), ${TRIALS} trial(s) per mode`);
    });

    afterAll(() => {
      const byKind = new Map<string, number>();
      for (const k of kills) byKind.set(`${k.mode} ${k.kind}`, (byKind.get(`${k.mode} ${k.kind}`) ?? 0) + 1);
      const list = (m: Map<string, number>) => [...m].map(([k, n]) => `${k} ${n}`).join(', ') || 'none';
      console.log(
        `random-kills summary: ${passed.full + passed.online} trial(s) passed (${passed.full} full, ${passed.online} online), ` +
          `${kills.length} SIGKILL(s), each while the victim ran: ${list(byKind)}; ` +
          `${kills.filter((k) => k.retry.endedBy === 'heartbeat timeout' && k.last.completed && k.last.worker !== k.killed.worker).length} retried elsewhere after a heartbeat timeout; seed ${SEED}`,
      );
    });

    // Each trial's own databases, empty until the trial seeds its source, and their connection names.
    const databases: Record<string, string> = {};
    const connections: Record<string, string> = {};
    for (let i = 0; i < TRIALS; i += 1) {
      for (const [name, role] of [
        [`fsrc${i}`, `full_source_${i}`],
        [`ftgt${i}`, `full_target_${i}`],
        [`osrc${i}`, `online_source_${i}`],
        [`otgt${i}`, `online_target_${i}`],
      ]) {
        databases[role] = '';
        connections[name] = role;
      }
    }
    const suite = stackSuite({
      name: 'rkill',
      databases,
      connections,
      ...(server ? { server } : {}),
      workers: 0,
      setUpTimeoutMs: 120_000,
      ready: async ({ stack }) => {
        const lanes = LANES.filter((l) => l.trials.length > 0);
        for (const { name } of lanes) {
          const taskQueue = `${stack.taskQueue}-${name}`;
          laneEnv[name] = { FERRY_TASK_QUEUE: taskQueue };
          ferries[name] = FerryClient.fromClient(stack.client, { address: stack.server.address, taskQueue }, { timings: TEST_TIMINGS });
          pools[name] = [];
        }
        await Promise.all(lanes.flatMap(({ name }) => [0, 1].map(async () => pools[name].push(await startWorker(name)))));
      },
    });

    function startWorker(lane: string): Promise<RunningProcessWorker> {
      spawned += 1;
      return suite.stack.startWorkerProcessReady(`${lane}-w${spawned}`, [], laneEnv[lane]);
    }

    /** Whether a copyChunk attempt owns its chunk's checkpoint row (it has committed batches and is not done). */
    async function ownsCheckpoint(target: string, migrationId: string, a: RunningActivity): Promise<boolean> {
      const rows = await suite.dbs
        .query<{ owner: string }>(target, 'SELECT owner FROM _ferry.checkpoints WHERE migration_id = $1 AND chunk_index >= 0 AND rows_copied > 0 AND NOT done', [
          migrationId,
        ])
        .catch(() => []);
      return rows.some((r) => r.owner === `${a.activityId}#${a.attempt}`);
    }

    /**
     * Waits until an activity of `kind` runs on a worker of the lane and has heartbeated, waits a
     * random moment more, and SIGKILLs that worker if the same attempt still runs there (else looks
     * again). Starts the replacement.
     */
    async function placeKill(
      /** The trial's label and how to rerun it, for the error. */
      context: string,
      lane: Lane,
      kind: Kind,
      rand: () => number,
      migrationId: string,
      eligible: (a: RunningActivity) => Promise<boolean>,
      /** Right after the kill, before the replacement starts: the next attempt must not meet the hold. */
      killed: () => Promise<void>,
    ) {
      const ferry = ferries[lane.name];
      const pool = pools[lane.name];
      const workflows = async () => (kind === 'preflight' ? preflightHelpers(ferry, migrationId) : [migrationId, `${migrationId}/table-0`, `${migrationId}/table-1`]);
      for (;;) {
        const candidate = await eventually(
          async () => {
            const busy = (await runningActivities(ferry, await workflows())).filter((a) => activitiesOf(kind).includes(a.activity) && a.heartbeating && pool.some((w) => w.identity === a.worker));
            const found: RunningActivity[] = [];
            for (const a of busy) if (await eligible(a)) found.push(a);
            return found.length > 0 ? found[Math.floor(rand() * found.length)] : undefined;
          },
          180_000,
          50,
        ).catch(async (err: Error) => {
          // What the lane's workers last wrote: a worker that stopped answering shows where.
          const tails = pool.map((w) => `${w.identity} (exit ${w.process.exitCode ?? 'none'}):\n${w.output().trimEnd().split('\n').slice(-4).join('\n')}`);
          throw new Error(`${context}: no ${kind} ran on lane ${lane.name}: ${err.message}\n${await diagnose(ferry, migrationId)}\n${tails.join('\n')}`);
        });
        // The random moment of the kill, inside the activity's run (its hold outlasts it).
        const delayMs = Math.floor(rand() * MAX_DELAY_MS[kind]);
        await sleep(delayMs);
        const still = (await runningActivities(ferry, [candidate.workflowId])).find(
          (a) => a.activityId === candidate.activityId && a.attempt === candidate.attempt && a.worker === candidate.worker && a.heartbeating,
        );
        if (!still || !(await eligible(still))) continue;
        const victim = pool.find((w) => w.identity === candidate.worker)!;
        victim.process.kill('SIGKILL');
        await victim.exited;
        const at = Date.now();
        // Finished in the moment between the look and the kill: nothing to retry; the hold
        // still keeps the activity's next run (a new slice) busy, so aim again.
        const missed = await finishedBeforeKill(ferry, candidate);
        if (!missed) await killed();
        pool.splice(pool.indexOf(victim), 1, await startWorker(lane.name));
        if (missed) {
          console.log(`${context}: ${candidate.activity} ${candidate.activityId} attempt ${candidate.attempt} finished before the kill; aiming again`);
          continue;
        }
        return { killed: { ...candidate, at } as Killed, delayMs };
      }
    }

    /**
     * What keeps the trial's activity busy: locks taken before the migration starts, or as soon as
     * the moment for them comes (a table exists, a table's copy is done, capture is installed).
     */
    function holdFor(kind: Kind, mode: Mode, migrationId: string, source: string, target: string) {
      const tables = mode === 'full' ? FULL_TABLES.map(([t]) => t) : ONLINE_TABLES.map(([t]) => t);
      const holds: HeldLock[] = [];
      let ended = false;
      const watchers: Promise<void>[] = [];
      /** Takes the lock once `ready` (a boolean SQL expression) holds, the moment it does (HeldLock.takeWhen). */
      const when = (url: string, ready: string, label: string, statements: string[]) =>
        watchers.push(
          HeldLock.takeWhen(url, label, ready, statements, () => ended).then((held) => {
            if (held) holds.push(held);
          }),
        );
      const literal = (v: string | number) => `'${String(v).replace(/'/g, "''")}'`;
      // Names are looked up in the catalogs' rows, read with each check's fresh snapshot. Not with
      // to_regclass: inside one round of checks (a DO block) it went on answering for a table
      // created after the round began as if it were not there, so a hold landed up to a round late
      // and a buildIndex slipped past it (seed 950746186, full:3, three runs of four).
      const relation = (qualified: string) => {
        const [schema, name] = qualified.split('.');
        return `(SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ${literal(schema)} AND c.relname = ${literal(name)})`;
      };
      const hasPrimaryKey = (qualified: string) => `EXISTS (SELECT 1 FROM pg_index WHERE indrelid = ${relation(qualified)} AND indisprimary)`;
      // Copied, and its primary key built (the index-free load adds it after the copy, under a lock
      // of its own that a hold taken earlier would block).
      const copied = (i: number, t: string) =>
        `(SELECT count(*) > 0 AND bool_and(done) AND ${hasPrimaryKey(t)}
            FROM _ferry.checkpoints WHERE migration_id = ${literal(migrationId)} AND table_index = ${i} AND chunk_index >= 0)`;
      return {
        /** Before `ferry start`. */
        async before() {
          if (kind === 'preflight') holds.push(await HeldLock.take(suite.dbs.url(source), 'source table', [`LOCK TABLE ${tables[0]} IN ACCESS EXCLUSIVE MODE`]));
          if (kind === 'prepareTarget') holds.push(await HeldLock.take(suite.dbs.url(target), 'bookkeeping lock', [`SELECT pg_advisory_xact_lock(hashtext('${BOOKKEEPING_LOCK}'))`]));
          if (kind === 'installCapture') holds.push(await HeldLock.take(suite.dbs.url(source), 'capture lock', [`SELECT pg_advisory_xact_lock(hashtext('${CAPTURE_LOCK}'))`]));
        },
        /** Once the migration runs (`ferry start` may still be waiting for its preflight). */
        watch() {
          if (kind === 'validation' || kind === 'syncChanges') {
            // A copied table, locked before its validation or sync begins: either waits for the lock.
            const lock = kind === 'validation' ? 'ACCESS EXCLUSIVE' : 'SHARE';
            tables.forEach((t, i) => when(suite.dbs.url(target), copied(i, t), `${t} copied`, [`LOCK TABLE ${t} IN ${lock} MODE`]));
          }
          if (kind === 'buildIndex') {
            // Writers' lock from the moment the table has its primary key: sync and validation go on, CREATE INDEX waits.
            when(suite.dbs.url(target), hasPrimaryKey(INDEXED[mode]), 'indexed table', [
              `LOCK TABLE ${INDEXED[mode]} IN ROW EXCLUSIVE MODE`,
            ]);
          }
          if (kind === 'awaitWriters') {
            // A write transaction open across the freeze: the cutover waits for it to end. Taken
            // once capture is installed whole (its rows complete): capture goes in table by table,
            // and a write held open before a table's part would keep the install waiting instead.
            when(suite.dbs.url(source), `EXISTS (SELECT 1 FROM _ferry_capture.captures WHERE complete)`, 'open write', [
              `UPDATE public.accounts SET note = 'held open by the test' WHERE id = ${HELD_ROW}`,
            ]);
          }
        },
        async release() {
          ended = true;
          await Promise.allSettled(watchers);
          await Promise.all(holds.splice(0).map((h) => h.release(kind === 'awaitWriters')));
        },
      };
    }

    async function runTrial(lane: Lane, trial: number): Promise<void> {
      const { mode } = lane;
      const rand = prng(trialSeed(SEED, mode, trial));
      const kind = kindOf(mode, trial);
      const afterwards = rand() < 0.5 ? 'keep-frozen' : 'unfreeze';
      const ferry = ferries[lane.name];
      const source = `${mode}_source_${trial}`;
      const target = `${mode}_target_${trial}`;
      const tables = mode === 'full' ? FULL_TABLES : ONLINE_TABLES;
      const spec =
        mode === 'full'
          ? { source: `fsrc${trial}`, target: `ftgt${trial}`, batchRows: 1000, tables: [{ name: 'public.ledger', chunks: 3 }, { name: 'public.lines', chunks: 2 }] }
          : {
              source: `osrc${trial}`,
              target: `otgt${trial}`,
              mode: 'online',
              batchRows: 1000,
              tables: [{ name: 'public.accounts', chunks: 2 }, 'public.items'],
              cutover: { approval: 'auto', afterwards },
            };
      // Under a rate cap, one table copies at a time: two would share the cap and have it re-shared
      // when one finishes — a control change, which ends running slices (and a pending retry)
      // instead of letting Temporal retry the killed one.
      if (kind === 'copyChunk') Object.assign(spec, { parallelism: { tables: 1 } });
      const label = `[${mode} ${trial + 1}/${TRIALS} ${kind}${mode === 'online' ? ` ${afterwards}` : ''}]`;
      const rerun = `FERRY_CHAOS_SEED=${SEED} FERRY_CHAOS_ONLY=${mode}:${trial}`;

      await suite.dbs.exec(source, mode === 'full' ? FULL_SOURCE : ONLINE_SOURCE);
      const inventoryBefore = await objectInventory(suite.dbs, source);
      const id = `rkill-${mode}-${trial}-${SEED}`;
      const hold = holdFor(kind, mode, id, source, target);
      await hold.before();
      const beforeCopy = kind === 'copyChunk' ? await HeldLock.take(suite.dbs.url(target), 'bookkeeping lock', [`SELECT pg_advisory_xact_lock(hashtext('${BOOKKEEPING_LOCK}'))`]) : undefined;
      const writers = mode === 'online' ? await startWriters(suite.dbs.url(source), WRITERS) : undefined;
      const t0 = Date.now();
      const starting = ferry.start(spec, { id });
      starting.catch(() => undefined);
      try {
        if (kind === 'copyChunk') {
          // Slow enough to be caught mid-chunk (ledger about 5 s, accounts about 7 s: a kill
          // looks, waits up to 1.5 s and looks again, on a loaded machine); never changed again (a
          // change would end the slice). The target's bookkeeping is held until the cap is in
          // place, so no copy starts before it.
          await starting;
          await ferry.throttle(id, { rowsPerSecond: mode === 'full' ? 12_000 : 3_000 });
          await beforeCopy!.release(false);
        }
        hold.watch();
        const eligible = async (a: RunningActivity) => kind !== 'copyChunk' || ownsCheckpoint(target, id, a);
        const placed = await placeKill(`${label} ${rerun}`, lane, kind, rand, id, eligible, () => hold.release()).finally(() => hold.release());
        const retrying = awaitRetry(ferry, placed.killed);
        retrying.catch(() => undefined);
        await starting.catch((err: Error) => {
          throw new Error(`${label} ${rerun}: ferry start failed: ${err.message}`);
        });
        const result = await resultWithin(ferry, id, 300_000).catch(async (err: Error) => {
          throw new Error(`${label} ${rerun}: ${err.message}`);
        });
        await writers?.stop();
        const record: KillRecord = { mode, trial, kind, ...placed, retry: await retrying, last: await lastAttempt(ferry, placed.killed) };
        kills.push(record);
        const { killed, retry, last } = record;
        console.log(
          `${label} killed ${killed.worker} running ${killed.activity} attempt ${killed.attempt} (${killed.workflowId}, activity ${killed.activityId}) ` +
            `${placed.delayMs} ms after seeing it; ${retry.endedBy}, attempt ${last.attempt} on ${last.worker} → ${result.state} after ${((Date.now() - t0) / 1000).toFixed(1)}s`,
        );
        const context = `${label} ${rerun}; killed ${killed.worker} running ${kind}`;
        if (result.state !== 'SUCCEEDED') throw new Error(`${context}: ${result.state} ${JSON.stringify(result.error)}\n${await diagnose(ferry, id)}`);
        // The kill was survived as designed: a heartbeat timeout, then the next attempt, completed elsewhere.
        if (retry.endedBy !== 'heartbeat timeout') throw new Error(`${context}: the killed attempt ended by ${retry.endedBy}`);
        if (!last.completed || last.attempt < retry.attempt || last.worker === killed.worker || !last.worker) {
          throw new Error(`${context}: the activity's last attempt was ${JSON.stringify(last)}, expected attempt ≥ ${retry.attempt} completed by another worker`);
        }

        for (const [table, key] of tables) {
          const cmp = await compareTable(suite.dbs, source, target, table, key);
          if (!cmp.equal || cmp.duplicateKeys > 0) throw new Error(`${context}: ${table} differs: ${JSON.stringify(cmp)}`);
          if (mode === 'full') {
            // Checkpoints counted every committed row exactly once, across the kill.
            const copied = result.tables.find((t) => t.source === table)?.rowsCopied;
            if (copied !== cmp.sourceRows) throw new Error(`${context}: ${table} rowsCopied ${copied}, source has ${cmp.sourceRows}`);
          }
        }
        // Validation mended nothing: a row the copy or the sync lost across the kill would
        // otherwise pass the comparison above, repaired.
        const repairs = await repairsFound(ferry, result);
        if (repairs.length > 0) throw new Error(`${context}: validation had to repair: ${repairs.join('; ')}`);
        if (mode === 'online') {
          // The copy and the sync, counted by the target's statistics (accounts 5,001–20,000 are
          // rows no writer touches: only the copy brings them).
          for (const [table] of tables) {
            const copied = result.tables.find((t) => t.source === table)?.rowsCopied ?? 0;
            const problem = await copiedAndApplied(suite.dbs, target, table, copied, table === 'public.accounts' ? UNTOUCHED_ACCOUNTS : 0);
            if (problem) throw new Error(`${context}: ${problem}`);
          }
          if (writers!.stats.otherErrors.length > 0) throw new Error(`${context}: writers failed: ${writers!.stats.otherErrors.slice(0, 3).join('; ')}`);
          // Every writer was stopped by the freeze, so the source cannot have changed after cutover.
          if (writers!.stats.frozenErrors.length !== WRITERS) {
            throw new Error(`${context}: only ${writers!.stats.frozenErrors.length} of ${WRITERS} writers met the freeze`);
          }
          // What the migration left on the source, against what was there before it.
          const after = await objectInventory(suite.dbs, source);
          const added = after.filter((o) => !inventoryBefore.includes(o)).map((o) => o.replace(/_[0-9a-f]{12}(?=( [a-zA-Z])?$)/, ''));
          const removed = inventoryBefore.filter((o) => !after.includes(o));
          const triggers = await ferryTriggers(suite.dbs, source);
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
            const write = await suite.dbs.exec(source, 'DELETE FROM public.items').then(() => 'accepted', (err: Error) => err.message);
            if (!/frozen/.test(write)) throw new Error(`${context}: a write to the kept-frozen source was ${write}`);
          }
        }
        passed[mode] += 1;
      } finally {
        await beforeCopy?.release(false);
        await hold.release();
        await writers?.stop();
      }
    }

    async function runLane(lane: Lane): Promise<void> {
      for (const trial of lane.trials) await runTrial(lane, trial);
    }

    it('full-load and online migrations survive a worker killed while it runs each chosen activity: retried elsewhere, target equal to the source', async () => {
      const lanes = await Promise.allSettled(LANES.map(runLane));
      const failures = lanes.filter((l): l is PromiseRejectedResult => l.status === 'rejected').map((l) => l.reason as Error);
      if (failures.length > 0) throw new Error(failures.map((f) => f.stack ?? f.message).join('\n\n'));
      expect(kills.length).toBe(LANES.reduce((n, l) => n + l.trials.length, 0));
      // Every kill hit the activity it aimed at, and was retried elsewhere after a heartbeat timeout.
      for (const k of kills) {
        expect({ kind: k.kind, activity: activitiesOf(k.kind).includes(k.killed.activity), endedBy: k.retry.endedBy, retried: k.last.completed && k.last.worker !== k.killed.worker }).toEqual({
          kind: k.kind,
          activity: true,
          endedBy: 'heartbeat timeout',
          retried: true,
        });
      }
      if (!ONLY) {
        for (const mode of ['full', 'online'] as const) {
          const hit = [...new Set(kills.filter((k) => k.mode === mode).map((k) => k.kind))].sort();
          expect({ mode, hit }).toEqual({ mode, hit: TRIALS >= MENU[mode].length ? [...MENU[mode]].sort() : hit });
        }
      }
    }, 1_800_000);
  });
}
