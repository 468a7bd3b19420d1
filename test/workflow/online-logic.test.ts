/**
 * The online chain's logic — repair rounds through the change log, ConsistencyBreach after the
 * third, the periodic re-check of changed rows while waiting for approval, a blocked cutover
 * and the order of its compensations — on a real dev server with fake activities, so each case
 * takes seconds. (Every real activity is tested against PostgreSQL in test/integration.)
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Activities } from '../../activities';
import { controlSignal } from '../../workflows/definitions';
import { BUSY_DWELL_MS, CROWDED_AFTER_MS } from '../../workflows/migration/table';
import type { MigrationPlan } from '../../src/core/plan';
import { cutoverTaskQueue, readyTaskQueue } from '../../src/core/names';
import { HEARTBEAT_THROTTLE } from '../../src/worker';
import { CopyTally, mixedTables } from '../helpers/plans';
import { activityQueues, historySteps } from '../helpers/history';
import { eventually, resultWithin, TEST_TIMINGS, TestStack, waitForPhase } from '../helpers/stack';

const PLAN: MigrationPlan = {
  sourceServer: '15',
  targetServer: '15',
  targetReplicaRole: true,
  tables: [
    {
      index: 0,
      source: { schema: 'public', name: 't' },
      target: { schema: 'public', name: 't' },
      columns: ['id'],
      keyColumns: [{ name: 'id', type: 'bigint', collatable: false }],
      copyFormat: 'binary',
      keyCollateC: false,
      rowsEstimated: 20,
      chunks: [{ index: 0, lower: null, upper: null }],
      targetExisted: false,
      sourceWrites: 0,
    },
  ],
};

interface Script {
  /** validateChunk finds a differing range this many times before it finds none. */
  mismatchRounds: number;
  /** awaitWriters reports a blocker this many times before it reports none. */
  blockedSlices: number;
  /** Keys each sync slice reports applied (the application writing to the table). */
  appliedPerSlice: number;
  /**
   * The table's sync slices hold on, heartbeating and deaf to cancellation, until the drain's
   * sealing slice takes their fence — as a slice blocked in a write does — and then end as
   * Superseded, as the real activity's next write would.
   */
  holdSlices: boolean;
  /** A ready table's slice (one given crowdedAfterMs) reports that it waited too long for a slot. */
  crowded: boolean;
  /** finishTarget fails for good: the cutover rolls back after the drain sealed the tables. */
  finishTargetFails: boolean;
  /** The plan is one large table and eight small ones (mixedTables), each copy taking a second. */
  mixed: boolean;
}

/** What the real sync throws once a newer fence owns the table's sync. */
const superseded = () => ApplicationFailure.create({ type: 'Superseded', nonRetryable: true, message: "this table's sync is owned by a newer attempt" });

/** A drain's fence is a year ahead of the clock; a table's is the clock. */
const isDrainFence = (fence: number) => fence > Date.now() + 24 * 3600_000;

describe('the online chain, with fake activities', () => {
  let stack: TestStack;
  let worker: Worker;
  let cutoverWorker: Worker;
  let readyWorker: Worker;
  let running: Promise<void>;
  let calls: string[];
  /** Each sync slice's busyDwellMs (undefined: none asked). */
  let dwells: (number | undefined)[];
  const script: Script = { mismatchRounds: 0, blockedSlices: 0, appliedPerSlice: 0, holdSlices: false, crowded: false, finishTargetFails: false, mixed: false };
  /** With script.mixed: the small and large tables copying now, and the most seen at once. */
  const copying = new CopyTally();
  /** When each sync slice and dirty-key re-check began, in order. */
  let timeline: { name: 'sync' | 'recheck'; at: number; crowdedAfterMs?: number }[];
  /** The fences of the table's own sync slices, and of the drain's sealing slices. */
  let tableFences: number[];
  let seals: number[];
  let held: number;
  let releaseHeld: (() => void) | undefined;
  /** Each activity of the table's, in order, with the task queue it ran on. */
  let queues: { name: string; queue: string }[];
  const count = (name: string) => calls.filter((c) => c === name).length;
  const noting = (name: string) => queues.push({ name, queue: Context.current().info.taskQueue });

  const fakes: Partial<Activities> = {
    // Workers without FERRY_NATS_URL: the run publishes no events after its first burst.
    async publishEvents() {
      return { enabled: false, stored: 0, duplicates: 0 };
    },
    async preflight() {
      calls.push('preflight');
      return script.mixed ? { ...PLAN, tables: mixedTables() } : PLAN;
    },
    async prepareTarget() {
      calls.push('prepareTarget');
      return { created: 1 };
    },
    async installCapture() {
      calls.push('installCapture');
      return { ddlGuard: true };
    },
    async copyChunk(input) {
      calls.push('copyChunk');
      noting('copyChunk');
      if (script.mixed) {
        await copying.during(input.table.index, () => Context.current().sleep(1_000));
      }
      return { checkpoint: { lastKey: null, rowsCopied: 20, done: true }, rows: 20, bytes: 200, batches: 1 };
    },
    async syncChanges(input) {
      calls.push('syncChanges');
      noting('syncChanges');
      dwells.push(input.busyDwellMs);
      timeline.push({ name: 'sync', at: Date.now(), crowdedAfterMs: input.crowdedAfterMs });
      if (!isDrainFence(input.fence)) tableFences.push(input.fence);
      if (script.holdSlices && !isDrainFence(input.fence)) {
        held += 1;
        const ctx = Context.current();
        await new Promise<void>((resolve) => {
          const beat = setInterval(() => ctx.heartbeat(), 500);
          releaseHeld = () => {
            clearInterval(beat);
            resolve();
          };
        });
        throw superseded();
      }
      // A table's slice after the drain sealed its table: the fence is the drain's now.
      if (seals.length > 0 && !isDrainFence(input.fence)) {
        throw superseded();
      }
      const crowded = script.crowded && input.crowdedAfterMs !== undefined ? { crowded: true } : {};
      return { applied: script.appliedPerSlice, rounds: script.appliedPerSlice > 0 ? 1 : 0, caughtUp: true, pending: 0, lagSeconds: 0, ...crowded };
    },
    async validateChunk(input) {
      calls.push('validateChunk');
      noting('validateChunk');
      if (script.mismatchRounds > 0) {
        script.mismatchRounds -= 1;
        return { match: false, sourceRows: 20, targetRows: 19, mismatches: [input.range], excluded: 0 };
      }
      return { match: true, sourceRows: 20, targetRows: 20, mismatches: [], excluded: 0 };
    },
    // The cutover's drain of its tables: the first slice of each seals it.
    async drainTables(input) {
      calls.push('drainTables');
      seals.push(input.fence);
      releaseHeld?.();
      return { tables: input.tables.map((t) => ({ index: t.index, checked: 0, mismatched: 0, remaining: 0 })) };
    },
    async enqueueKeys() {
      calls.push('enqueueKeys');
      return { enqueued: 1 };
    },
    async checkDirtyKeys() {
      calls.push('checkDirtyKeys');
      noting('checkDirtyKeys');
      timeline.push({ name: 'recheck', at: Date.now() });
      return { checked: 0, mismatched: 0, waiting: 0, remaining: 0 };
    },
    async addPrimaryKey() {
      calls.push('addPrimaryKey');
      noting('addPrimaryKey');
      return { built: true };
    },
    async listIndexes() {
      calls.push('listIndexes');
      noting('listIndexes');
      return { indexes: [] };
    },
    async analyzeTable() {
      calls.push('analyzeTable');
      noting('analyzeTable');
    },
    async addForeignKeys() {
      calls.push('addForeignKeys');
      return { foreignKeys: [], skipped: [] };
    },
    async setFreeze(input) {
      calls.push(`setFreeze:${input.state}`);
      return { at: new Date().toISOString(), applied: true };
    },
    async awaitWriters() {
      calls.push('awaitWriters');
      if (script.blockedSlices > 0) {
        script.blockedSlices -= 1;
        return { blockers: [{ pid: 4242, applicationName: 'batch', user: 'app', xactAgeSeconds: 30, query: 'UPDATE t SET …', state: 'idle in transaction' }], terminated: [] };
      }
      return { blockers: [], terminated: [] };
    },
    async finishTarget() {
      calls.push('finishTarget');
      if (script.finishTargetFails) throw ApplicationFailure.nonRetryable('the target refused its last step', 'TargetRefused');
      return { writtenDuringCopy: [] };
    },
    async releaseSource(input) {
      calls.push(`releaseSource:${input.freeze}`);
      return { pending: [] };
    },
    async dropTargetObjects() {
      calls.push('dropTargetObjects');
      return { dropped: [] };
    },
    async releaseBookkeeping() {
      calls.push('releaseBookkeeping');
    },
  };

  beforeAll(async () => {
    stack = await TestStack.start({ connections: {}, workers: 0 });
    const connection = await NativeConnection.connect({ address: stack.server.address });
    const common = { connection, namespace: stack.server.namespace, activities: fakes, ...HEARTBEAT_THROTTLE };
    worker = await Worker.create({ ...common, taskQueue: stack.taskQueue, workflowBundle: { codePath: process.env.FERRY_WORKFLOW_BUNDLE! } });
    // As every Ferry worker does: the cutover's steps inside the outage come on a queue of their own.
    cutoverWorker = await Worker.create({ ...common, taskQueue: cutoverTaskQueue(stack.taskQueue) });
    // And the ready tables' syncs on another.
    readyWorker = await Worker.create({ ...common, taskQueue: readyTaskQueue(stack.taskQueue) });
    running = Promise.all([worker.run(), cutoverWorker.run(), readyWorker.run()]).then(() => undefined);
  });

  afterEach(() => {
    script.holdSlices = false;
    releaseHeld?.();
  });

  afterAll(async () => {
    worker?.shutdown();
    cutoverWorker?.shutdown();
    readyWorker?.shutdown();
    await running;
    await stack?.teardown();
  });

  beforeEach(() => {
    calls = [];
    dwells = [];
    timeline = [];
    script.crowded = false;
    script.finishTargetFails = false;
    script.mixed = false;
    tableFences = [];
    seals = [];
    queues = [];
    held = 0;
    script.holdSlices = false;
    script.mismatchRounds = 0;
    script.appliedPerSlice = 0;
    script.blockedSlices = 0;
  });

  // A re-check every 5 s and idle looks at most 5 s apart (production: 15 s and 30 s), so that
  // the cases waiting on them take seconds.
  const start = (id: string, cutover: Record<string, unknown> = {}) =>
    stack.ferry.start(
      { source: 'a', target: 'b', mode: 'online', tables: ['public.t'], cutover: { approval: 'auto', ...cutover } },
      { id, skipPreflight: true, timings: { ...TEST_TIMINGS, recheckMs: 5_000, maxIdleMs: 5_000 } },
    );

  it('repairs through the change log, round after round, then cuts over', async () => {
    script.mismatchRounds = 2;
    const { id } = await start('repairs');
    const result = await resultWithin(stack.ferry, id, 60_000);
    expect(result.state).toBe('SUCCEEDED');
    // Two rounds found a difference and put its keys back into the log; the third passed.
    expect(count('validateChunk')).toBe(3);
    expect(count('enqueueKeys')).toBe(2);
    expect(result.events.filter((e) => e.type === 'ValidationPassed')).toHaveLength(1);
    // Never a re-copy under a running sync.
    expect(count('copyChunk')).toBe(1);
    // The cutover's steps in order (the table may still run a sync slice of its own meanwhile:
    // tables keep syncing until the writers are done).
    const cutover = calls.slice(calls.indexOf('setFreeze:frozen'));
    expect(cutover.filter((c) => c !== 'syncChanges' && c !== 'checkDirtyKeys')).toEqual([
      'setFreeze:frozen',
      'awaitWriters',
      'drainTables',
      'finishTarget',
      // keep-frozen (the default): the freeze stays and now says "moved"; capture goes.
      'setFreeze:moved',
      'releaseSource:keep',
      'releaseBookkeeping',
    ]);
    // The drain and the final check of changed rows (one activity for the group of tables), between the writers and the finish.
    const drain = cutover.slice(cutover.indexOf('awaitWriters'), cutover.indexOf('finishTarget'));
    expect(drain.slice(-1)).toEqual(['drainTables']);
  });

  it('fails with ConsistencyBreach after the third repair round, and compensates', async () => {
    script.mismatchRounds = 10;
    const { id } = await start('breach');
    const result = await resultWithin(stack.ferry, id, 60_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('ConsistencyBreach');
    expect(count('validateChunk')).toBe(4);
    expect(count('enqueueKeys')).toBe(3);
    expect(calls).not.toContain('setFreeze:frozen');
    // Undo newest first: capture, then what the target got.
    expect(calls.slice(-2)).toEqual(['releaseSource:remove', 'dropTargetObjects']);
  });

  it('re-checks the changed rows while it waits for approval, as long as changes arrive', async () => {
    script.appliedPerSlice = 3;
    const { id } = await start('recheck', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    // Until validated a slice returns as soon as it is caught up; ready, a busy one dwells.
    expect(dwells[0]).toBeUndefined();
    await eventually(async () => dwells[dwells.length - 1] === BUSY_DWELL_MS, 10_000);
    const before = count('checkDirtyKeys');
    // Every re-check period (5 s here) a caught-up table whose sync applied keys compares its dirty set again.
    await eventually(async () => count('checkDirtyKeys') >= before + 2, 60_000);
    // Writes stop: the table re-checks once more at most (for what it applied last), then stays
    // quiet while its looks at the log space out (0.5, 1, 2, 4, then 5 s: past two re-check periods).
    script.appliedPerSlice = 0;
    const quietFrom = { checks: count('checkDirtyKeys'), syncs: count('syncChanges') };
    await eventually(async () => count('syncChanges') >= quietFrom.syncs + 7, 90_000);
    expect(count('checkDirtyKeys') - quietFrom.checks).toBeLessThanOrEqual(1);
    await stack.ferry.approve(id);
    expect((await resultWithin(stack.ferry, id, 60_000)).state).toBe('SUCCEEDED');
  }, 180_000);

  it("runs a ready table's sync slices and re-checks on the ready queue, out of the way of the tables not ready yet", async () => {
    script.appliedPerSlice = 3;
    const { id } = await start('ready-queue', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    await eventually(async () => count('checkDirtyKeys') >= 2, 60_000);
    const ready = queues.findIndex((q) => q.queue === readyTaskQueue(stack.taskQueue));
    expect(ready).toBeGreaterThan(0);
    // Until ready, everything on the migration's own queue: the copy, the key, ANALYZE, the
    // catch-up slices, the validation, the indexes listed.
    const before = queues.slice(0, ready);
    expect(before.every((q) => q.queue === stack.taskQueue)).toBe(true);
    expect(new Set(before.map((q) => q.name))).toEqual(new Set(['copyChunk', 'addPrimaryKey', 'analyzeTable', 'syncChanges', 'validateChunk', 'listIndexes']));
    // Ready: every slice and re-check from then on on the ready queue.
    const after = queues.slice(ready);
    expect(after.every((q) => q.queue === readyTaskQueue(stack.taskQueue) && (q.name === 'syncChanges' || q.name === 'checkDirtyKeys'))).toBe(true);
    expect(after.filter((q) => q.name === 'checkDirtyKeys').length).toBeGreaterThanOrEqual(2);
    await stack.ferry.approve(id);
    expect((await resultWithin(stack.ferry, id, 60_000)).state).toBe('SUCCEEDED');
  }, 120_000);

  it('copies small tables four to a parallelism.tables slot, and a large table alone in its slot, as full mode does', async () => {
    script.mixed = true;
    copying.reset();
    const { id } = await stack.ferry.start(
      { source: 'a', target: 'b', mode: 'online', tables: ['public.*'], parallelism: { tables: 1 }, cutover: { approval: 'auto' } },
      { id: 'mixed', skipPreflight: true, timings: TEST_TIMINGS },
    );
    expect((await resultWithin(stack.ferry, id, 120_000)).state).toBe('SUCCEEDED');
    expect(count('copyChunk')).toBe(2 + 8);
    expect({ maxSmall: copying.maxSmall, smallBesideLarge: copying.smallBesideLarge }).toEqual({ maxSmall: 4, smallBesideLarge: 0 });
  }, 180_000);

  it('pauses a busy ready table off the slots while its slices find them crowded, and dwells again once they do not', async () => {
    script.appliedPerSlice = 3;
    const { id } = await start('crowded', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    await eventually(async () => timeline.some((t) => t.crowdedAfterMs === CROWDED_AFTER_MS), 10_000);
    // The gaps between one slice and the next, where no re-check came between (a due re-check
    // runs straight after a slice, and the next slice straight after it).
    const gapsFrom = (from: number) =>
      timeline
        .slice(from)
        .flatMap((t, i, all) => (i > 0 && t.name === 'sync' && all[i - 1].name === 'sync' && all[i - 1].crowdedAfterMs !== undefined ? [t.at - all[i - 1].at] : []));
    // Not crowded: back for the next slice after the short idle poll.
    const quick = timeline.length;
    await eventually(async () => gapsFrom(quick).length >= 3, 30_000);
    expect(Math.min(...gapsFrom(quick))).toBeLessThan(BUSY_DWELL_MS / 2);
    // Crowded: off the slots for a dwell's length at least between slices (the doubling is
    // capped at this test's maxIdleMs, 5 s).
    script.crowded = true;
    const crowded = timeline.length + 1;
    await eventually(async () => gapsFrom(crowded).length >= 3, 90_000);
    expect(Math.min(...gapsFrom(crowded))).toBeGreaterThanOrEqual(BUSY_DWELL_MS);
    // Room again: quick slices again.
    script.crowded = false;
    const again = timeline.length + 1;
    await eventually(async () => gapsFrom(again).length >= 3, 60_000);
    expect(Math.min(...gapsFrom(again))).toBeLessThan(BUSY_DWELL_MS / 2);
    await stack.ferry.approve(id);
    expect((await resultWithin(stack.ferry, id, 60_000)).state).toBe('SUCCEEDED');
  }, 240_000);

  it('syncs again at once after pause and resume sent back to back, however often', async () => {
    const { id } = await start('pause-resume', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    // Caught up and idle: its looks at the log space out towards the idle cap.
    const idle = count('syncChanges');
    await eventually(async () => count('syncChanges') >= idle + 5, 60_000);
    const resumed = count('syncChanges');
    for (let i = 0; i < 10; i += 1) {
      await stack.ferry.pause(id);
      await stack.ferry.resume(id);
    }
    // A resume wakes a waiting table (a slice within seconds, not at the end of an idle wait),
    // and the last control it applies is the resume, whatever order the signals arrived in:
    // with writes coming in again it syncs slice after slice.
    script.appliedPerSlice = 3;
    await eventually(async () => count('syncChanges') >= resumed + 5, 15_000);
    const status = await stack.ferry.status(id);
    expect(status.paused).toBe(false);
    await stack.ferry.cancel(id, 'test over');
    expect((await resultWithin(stack.ferry, id, 60_000)).state).toBe('CANCELLED');
  }, 120_000);

  it('applies no control older than the one it holds (signals to a table can arrive out of order)', async () => {
    const { id } = await start('control-order', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    const table = stack.ferry.handle(`${id}/table-0`);
    // A pause and the resume after it, as the parent numbers them, delivered resume first.
    await table.signal(controlSignal, { paused: false, seq: 1001 });
    await table.signal(controlSignal, { paused: true, seq: 1000 });
    const before = count('syncChanges');
    await eventually(async () => count('syncChanges') > before, 10_000);
    await stack.ferry.cancel(id, 'test over');
    expect((await resultWithin(stack.ferry, id, 60_000)).state).toBe('CANCELLED');
  }, 120_000);

  it('rolls back a cutover blocked past maxWait, lifting the freeze before releasing the source', async () => {
    script.blockedSlices = 1000;
    const { id } = await start('blocked', { maxWait: '2s', onBlocked: 'rollback' });
    const result = await resultWithin(stack.ferry, id, 60_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('CutoverBlocked');
    expect(result.error?.message).toContain('pid 4242 (batch, user app');
    const blocked = result.events.filter((e) => e.type === 'CutoverBlocked');
    expect(blocked).toHaveLength(1); // once per set of blockers, not once per slice
    expect(calls.slice(-3)).toEqual(['setFreeze:open', 'releaseSource:remove', 'dropTargetObjects']);
  });

  it('drains without waiting, inside the write outage, for a table whose slice ends only once the drain has taken its table over', async () => {
    const { id } = await start('sealed', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    // The table's next look at its log holds on; the cutover is approved meanwhile.
    script.holdSlices = true;
    await eventually(async () => held > 0, 30_000);
    await stack.ferry.approve(id);
    const result = await resultWithin(stack.ferry, id, 60_000);
    expect({ state: result.state, warnings: result.warnings }).toEqual({ state: 'SUCCEEDED', warnings: [] });
    // One sealing drain, its fence ahead of every fence the table handed out.
    expect(seals).toHaveLength(1);
    expect(Math.max(...tableFences)).toBeLessThan(seals[0]);
    // The table workflow ended (Superseded after the finish request is its normal end), and was
    // awaited before the migration's result.
    expect((await stack.client.workflow.getHandle(`${id}/table-0`).describe()).status.name).toBe('COMPLETED');
    expect(result.tables.map((t) => t.phase)).toEqual(['COMPLETED']);
    expect(calls.slice(calls.indexOf('finishTarget'))).toContain('releaseBookkeeping');
  });

  it('asks the tables to finish only past the point of no return and runs the outage on the cutover queue, so neither waits behind the tables', async () => {
    script.appliedPerSlice = 3; // the application keeps writing: the table's sync is busy at the freeze
    const { id } = await start('asked-after', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    await stack.ferry.approve(id);
    const result = await resultWithin(stack.ferry, id, 60_000);
    expect({ state: result.state, warnings: result.warnings }).toEqual({ state: 'SUCCEEDED', warnings: [] });
    const steps = await historySteps(stack.client, id);
    // Inside the outage every step went to the cutover task queue, none to the tables' own.
    const queues = await activityQueues(stack.client, id);
    for (const type of ['awaitWriters', 'drainTables', 'finishTarget']) expect([type, queues.get(type)]).toEqual([type, [cutoverTaskQueue(stack.taskQueue)]]);
    const flip = steps.indexOf('done:setFreeze');
    const noReturn = steps.indexOf('done:finishTarget');
    expect(flip).toBeGreaterThan(-1);
    expect(steps.slice(flip, noReturn)).toEqual(expect.arrayContaining(['done:awaitWriters', 'done:drainTables']));
    // The one table asked once, after the target was finished; none asked between.
    expect(steps.filter((s) => s === 'signal:finishSync')).toHaveLength(1);
    expect(steps.indexOf('signal:finishSync')).toBeGreaterThan(noReturn);
    // The drain sealed the table; the table workflow still ended normally, awaited before the result.
    expect(seals).toHaveLength(1);
    expect((await stack.client.workflow.getHandle(`${id}/table-0`).describe()).status.name).toBe('COMPLETED');
    expect(result.tables.map((t) => t.phase)).toEqual(['COMPLETED']);
  });

  it('cancels a sealed table still waiting to be asked when the cutover rolls back after the drain', async () => {
    script.appliedPerSlice = 3;
    script.finishTargetFails = true;
    const { id } = await start('sealed-rollback', { approval: 'manual' });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 60_000);
    await stack.ferry.approve(id);
    const result = await resultWithin(stack.ferry, id, 60_000);
    expect({ state: result.state, type: result.error?.type }).toEqual({ state: 'FAILED', type: 'TargetRefused' });
    // The drain had sealed the table, which was never asked to finish: the rollback cancelled it
    // before its compensations, the source reopened first.
    expect(seals).toHaveLength(1);
    expect((await historySteps(stack.client, id)).filter((s) => s === 'signal:finishSync')).toEqual([]);
    expect((await stack.client.workflow.getHandle(`${id}/table-0`).describe()).status.name).toBe('CANCELLED');
    expect(calls.slice(calls.indexOf('finishTarget'))).toEqual(['finishTarget', 'setFreeze:open', 'releaseSource:remove', 'dropTargetObjects']);
  });
});
