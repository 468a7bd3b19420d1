/**
 * The parent workflow's logic — chain order, saga compensation, cancellation, deadline, the
 * final callback — on a real dev server with fake activities, so each case takes seconds.
 * (Every real activity is tested against PostgreSQL in test/integration.)
 */
import { Context } from '@temporalio/activity';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Activities } from '../../activities';
import type { CallbackInput } from '../../activities/callback';
import { ResultDocument } from '../../src/core/status';
import { HEARTBEAT_THROTTLE } from '../../src/worker';
import { eventually, TestStack } from '../helpers/stack';
import { CopyTally, mixedTables } from '../helpers/plans';

type Mode = {
  copy: 'ok' | 'slow' | 'fail';
  mixed: boolean;
  /** validateChunk finds this table's rows differ, every time. */
  differs?: number;
  /** validateChunk finds rows differ in its next this many calls (any table). */
  differsNext?: number;
  /** checksumBlocks finds the target's rows one short of the source's. */
  blocksDiffer?: boolean;
};

describe('migrationWorkflow orchestration', () => {
  let stack: TestStack;
  let worker: Worker;
  let running: Promise<void>;
  let calls: string[];
  let callbacks: CallbackInput[];
  const mode: Mode = { copy: 'ok', mixed: false };
  /** Copies running now, and the most seen at once (mixed mode): small tables, large ones. */
  const copying = new CopyTally();

  const fakes: Partial<Activities> = {
    // Workers without FERRY_NATS_URL: the run publishes no events after its first burst.
    async publishEvents() {
      return { enabled: false, stored: 0, duplicates: 0 };
    },
    async preflight() {
      calls.push('preflight');
      if (mode.mixed) return { sourceServer: '15', targetServer: '15', tables: mixedTables() };
      return {
        sourceServer: '15',
        targetServer: '15',
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
            chunks: [
              { index: 0, lower: null, upper: ['10'] },
              { index: 1, lower: ['10'], upper: null },
            ],
            targetExisted: false,
            sourceWrites: 0,
          },
        ],
      };
    },
    async prepareTarget() {
      calls.push('prepareTarget');
      return { created: 1 };
    },
    async copyChunk(input) {
      if (mode.mixed) {
        await copying.during(input.table.index, () => Context.current().sleep(1_500));
        const done = { checkpoint: { lastKey: null, rowsCopied: 10, done: true }, rows: 10, bytes: 100, batches: 1 };
        return input.finish ? { ...done, finished: { built: 1, evicted: 0 } } : done;
      }
      calls.push(`copyChunk:${input.chunk.index}`);
      if (mode.copy === 'fail') throw ApplicationFailure.nonRetryable('disk full', 'PostgresError.53100');
      if (mode.copy === 'slow') {
        const ctx = Context.current();
        for (;;) {
          ctx.heartbeat();
          await ctx.sleep(100);
        }
      }
      return { checkpoint: { lastKey: null, rowsCopied: 10, done: true }, rows: 10, bytes: 100, batches: 1 };
    },
    async validateChunk(input) {
      calls.push(input.compareOnly ? `validateChunk:whole:${JSON.stringify(input.range)}` : 'validateChunk');
      if (mode.differsNext) {
        mode.differsNext -= 1;
        return { match: false, sourceRows: 10, targetRows: 9, mismatches: input.compareOnly ? [] : [input.range], excluded: 0 };
      }
      if (input.table.index === mode.differs) return { match: false, sourceRows: 10, targetRows: 9, mismatches: [{ lower: null, upper: null }], excluded: 0 };
      return { match: true, sourceRows: 10, targetRows: 10, mismatches: [], excluded: 0 };
    },
    async checksumBlocks(input) {
      const side = input.connection === 'a' ? 'source' : 'target'; // the spec's source
      calls.push(`checksumBlocks:${side}:${input.unit}/${input.units}`);
      const rows = side === 'target' && mode.blocksDiffer ? 9 : 10;
      return { rows, sum: String(rows * 7), blocks: null };
    },
    async repairRange() {
      calls.push('repairRange');
      return { deleted: 9, copied: 10 };
    },
    async addPrimaryKey() {
      calls.push('addPrimaryKey');
      return { built: true };
    },
    async listIndexes() {
      calls.push('listIndexes');
      return { indexes: [{ name: 't_v_idx', kind: 'index', unique: false, exclusion: false }] };
    },
    async buildIndex(input) {
      calls.push(`buildIndex:${input.index.name}`);
      return { built: true, evicted: 0 };
    },
    async analyzeTable() {
      calls.push('analyzeTable');
    },
    async addForeignKeys() {
      calls.push('addForeignKeys');
      return { foreignKeys: [{ table: { schema: 'public', name: 't' }, name: 't_fk' }], skipped: [] };
    },
    async validateForeignKey(input) {
      calls.push(`validateForeignKey:${input.foreignKey.name}`);
      return { validated: true };
    },
    async finishTarget() {
      calls.push('finishTarget');
      return { writtenDuringCopy: [] };
    },
    async dropTargetObjects() {
      calls.push('dropTargetObjects');
      return { dropped: [] };
    },
    async releaseBookkeeping() {
      calls.push('releaseBookkeeping');
    },
    async sendCallback(input) {
      calls.push('sendCallback');
      callbacks.push(input);
      return { status: 200 };
    },
  };

  const spec = (extra: Record<string, unknown> = {}) => ({
    source: 'a',
    target: 'b',
    tables: ['public.t'],
    callback: { url: 'http://127.0.0.1:9/hook' },
    ...extra,
  });

  beforeAll(async () => {
    stack = await TestStack.start({ connections: {}, workers: 0 });
    worker = await Worker.create({
      connection: await NativeConnection.connect({ address: stack.server.address }),
      namespace: stack.server.namespace,
      taskQueue: stack.taskQueue,
      workflowBundle: { codePath: process.env.FERRY_WORKFLOW_BUNDLE! },
      activities: fakes,
      ...HEARTBEAT_THROTTLE,
    });
    running = worker.run();
  });

  afterAll(async () => {
    worker?.shutdown();
    await running;
    await stack?.teardown();
  });

  beforeEach(() => {
    calls = [];
    callbacks = [];
    mode.copy = 'ok';
    mode.mixed = false;
    mode.differs = undefined;
    mode.differsNext = undefined;
    mode.blocksDiffer = undefined;
  });

  async function start(id: string, extra?: Record<string, unknown>) {
    return stack.ferry.start(spec(extra), { id, skipPreflight: true });
  }

  it('chains preflight → prepare → copy → primary key → validate → indexes → foreign keys → release, and calls back last', async () => {
    const { id } = await start('chain');
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');
    expect(calls[0]).toBe('preflight');
    expect(calls[1]).toBe('prepareTarget');
    expect(calls.slice(2, 4).sort()).toEqual(['copyChunk:0', 'copyChunk:1']);
    // Loaded without its primary key, which is built before anything reads by key; the source's
    // indexes are listed meanwhile.
    expect(calls.slice(4, 6).sort()).toEqual(['addPrimaryKey', 'listIndexes']);
    // Two chunks of a small table: each side summed in one share of its blocks, the two at once, and they matched.
    expect(calls.slice(6, 8).sort()).toEqual(['checksumBlocks:source:0/1', 'checksumBlocks:target:0/1']);
    expect(calls.slice(8)).toEqual([
      // The table's own indexes as soon as it is validated, then what spans tables.
      'buildIndex:t_v_idx',
      'analyzeTable',
      'addForeignKeys',
      'validateForeignKey:t_fk',
      'finishTarget',
      'releaseBookkeeping',
      'sendCallback',
    ]);
    expect(callbacks[0].idempotencyKey).toBe(id);
    expect((callbacks[0].body as ResultDocument).state).toBe('SUCCEEDED');
    expect(result.callback).toEqual({ delivered: true });
  });

  it("reports a two-chunk table's milestones to the parent in three signals (seven before they were batched), its events in order", async () => {
    const { id } = await start('signals', { validation: 'none' });
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');
    // The first chunk done; the last with FULL_DONE and TableCopied; IndexesBuilt with COMPLETED.
    // FULL_MIGRATING is the parent's to mark, once the table's workflow has started.
    const history = await stack.client.workflow.getHandle(`${id}/table-0`).fetchHistory();
    const signals = (history.events ?? []).filter((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes);
    expect(signals).toHaveLength(3);
    expect(result.events.filter((e) => e.table === 'public.t').map((e) => e.type)).toEqual(['SliceMigrated', 'SliceMigrated', 'TableCopied', 'IndexesBuilt']);
    const status = await stack.ferry.status(id);
    expect(status.tables[0]).toMatchObject({ phase: 'COMPLETED', rowsCopied: 20 });
  });

  it('copies small tables four to a parallelism.tables slot, and a large table alone in its slot', async () => {
    mode.mixed = true;
    copying.reset();
    const tables = mixedTables().map((t) => `public.${t.source.name}`);
    const { id } = await start('mixed', { tables, validation: 'none', parallelism: { tables: 1 } });
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');
    expect({ maxSmall: copying.maxSmall, smallBesideLarge: copying.smallBesideLarge }).toEqual({ maxSmall: 4, smallBesideLarge: 0 });
    // A small table's copy built its key and indexes: no activity of theirs ran.
    expect(calls.filter((c) => /addPrimaryKey|listIndexes|buildIndex|analyzeTable/.test(c)).sort()).toEqual(['addPrimaryKey', 'analyzeTable', 'buildIndex:t_v_idx', 'listIndexes']); // the large table's
  });

  it('hears of a small table only as it ends: its milestones come back with its result, in order', async () => {
    mode.mixed = true;
    const tables = mixedTables().map((t) => `public.${t.source.name}`);
    const { id } = await start('held', { tables });
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');
    for (const index of [1, 8]) {
      const history = await stack.client.workflow.getHandle(`${id}/table-${index}`).fetchHistory();
      expect((history.events ?? []).filter((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes)).toHaveLength(0);
      expect(result.events.filter((e) => e.table === `public.t${index}`).map((e) => e.type)).toEqual(['SliceMigrated', 'TableCopied', 'ValidationPassed', 'IndexesBuilt']);
    }
    // The large table still reports as it goes.
    const large = await stack.client.workflow.getHandle(`${id}/table-0`).fetchHistory();
    expect((large.events ?? []).filter((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes).length).toBeGreaterThan(0);
    expect(result.tables.map((t) => t.phase)).toEqual(Array(9).fill('COMPLETED'));
    const phases = (await stack.ferry.status(id)).transitions.filter((t) => t.machine === 'phase').map((t) => t.to);
    expect(phases).toEqual(['FULL_MIGRATING', 'FULL_DONE', 'VALIDATING', 'COMPLETED']);
  });

  it('compares the chunks of a table one by one, and repairs the one that differs, when the sides\' sums differ', async () => {
    mode.blocksDiffer = true;
    mode.differsNext = 1; // then its first chunk
    const { id } = await start('whole-differs');
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');
    const validation = calls.filter((c) => c.startsWith('validateChunk') || c.startsWith('checksumBlocks') || c === 'repairRange');
    expect(validation.slice(0, 2).sort().concat(validation.slice(2, 4), validation.slice(4).sort())).toEqual([
      'checksumBlocks:source:0/1',
      'checksumBlocks:target:0/1',
      'validateChunk',
      'validateChunk',
      'repairRange',
      'validateChunk',
    ]);
    expect(result.events.find((e) => e.type === 'ValidationPassed')?.detail?.repairedRanges).toBe(1);
  });

  it('hears what a small table held before the table fails', async () => {
    mode.mixed = true;
    mode.differs = 3;
    const tables = mixedTables().map((t) => `public.${t.source.name}`);
    const { id } = await start('held-failure', { tables });
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('ConsistencyBreach');
    // Copied, then validating, then the breach: sent in order as it failed.
    expect(result.events.filter((e) => e.table === 'public.t3').map((e) => e.type)).toEqual(['SliceMigrated', 'TableCopied', 'ConsistencyBreach']);
    expect(result.tables[3].phase).toBe('VALIDATING');
    expect(calls.filter((c) => c === 'repairRange')).toHaveLength(3);
  });

  it('shows a table FULL_MIGRATING while it copies, though the table sends no signal for it', async () => {
    mode.copy = 'slow';
    const { id } = await start('copying');
    await eventually(async () => (await stack.ferry.status(id)).tables[0]?.phase === 'FULL_MIGRATING', 30_000);
    const history = await stack.client.workflow.getHandle(`${id}/table-0`).fetchHistory();
    expect((history.events ?? []).filter((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes)).toHaveLength(0);
    await stack.ferry.cancel(id, 'test over');
    expect((await stack.ferry.result(id)).state).toBe('CANCELLED');
  });

  it('runs the compensation after a permanent failure and reports FAILED', async () => {
    mode.copy = 'fail';
    const { id } = await start('fails');
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('FAILED');
    expect(result.error).toMatchObject({ type: 'PostgresError.53100', message: 'disk full' });
    expect(calls.slice(-2)).toEqual(['dropTargetObjects', 'sendCallback']);
    expect((callbacks[0].body as ResultDocument).state).toBe('FAILED');
  });

  it('keeps everything for inspection with onFailure: keep', async () => {
    mode.copy = 'fail';
    const { id } = await start('keeps', { onFailure: 'keep' });
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('FAILED');
    expect(calls).not.toContain('dropTargetObjects');
    expect(result.warnings.join()).toMatch(/onFailure: keep/);
  });

  it('stops running copies on the cancel signal, compensates, and calls back CANCELLED', async () => {
    mode.copy = 'slow';
    const { id } = await start('cancel-signal');
    await eventually(async () => calls.filter((c) => c.startsWith('copyChunk')).length === 2);
    await stack.ferry.cancel(id, 'operator changed their mind');
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('CANCELLED');
    expect(result.error).toEqual({ message: 'operator changed their mind', type: 'Cancelled' });
    expect(calls.slice(-2)).toEqual(['dropTargetObjects', 'sendCallback']);
    expect((callbacks[0].body as ResultDocument).state).toBe('CANCELLED');
    const status = await stack.ferry.status(id);
    expect(status.transitions.filter((t) => t.machine === 'state').map((t) => t.to)).toEqual(['QUEUED', 'RUNNING', 'CANCELLING', 'CANCELLED']);
  });

  it('treats Temporal\'s own cancellation the same way and ends the execution as Canceled', async () => {
    mode.copy = 'slow';
    const { id } = await start('cancel-temporal');
    await eventually(async () => calls.filter((c) => c.startsWith('copyChunk')).length === 2);
    await stack.client.workflow.getHandle(id).cancel();
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('CANCELLED');
    expect(calls.slice(-2)).toEqual(['dropTargetObjects', 'sendCallback']);
    expect((await stack.client.workflow.getHandle(id).describe()).status.name).toBe('CANCELLED');
  });

  it('ends in TIMED_OUT with rollback when the deadline passes', async () => {
    mode.copy = 'slow';
    const { id } = await start('deadline', { deadline: '3s' });
    const result = await stack.ferry.result(id);
    expect(result.state).toBe('TIMED_OUT');
    expect(result.error?.type).toBe('DeadlineExceeded');
    expect(calls.slice(-2)).toEqual(['dropTargetObjects', 'sendCallback']);
    expect(result.duration_ms).toBeGreaterThanOrEqual(3000);
  });

  it('refuses an invalid spec sent straight to the workflow by another SDK', async () => {
    const handle = await stack.client.workflow.start('migrationWorkflow', {
      taskQueue: stack.taskQueue,
      workflowId: 'raw-invalid',
      args: [{ source: 'a', tables: ['nope'] }],
    });
    const err = await handle.result().catch((e) => e);
    expect(err).toBeInstanceOf(WorkflowFailedError);
    expect(String(err.cause?.message)).toMatch(/target: is required[\s\S]*tables\[0\]: must be qualified/);
    expect(calls).toEqual([]);
  });
});
