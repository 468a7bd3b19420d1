/**
 * Cancellation at every phase (preflight, copy, sync, validation, the approval wait), through
 * Ferry's `cancel` signal, `ferry cancel` and Temporal's own cancellation (`temporal workflow
 * cancel`): each ends CANCELLED with both databases exactly as they were before and a CANCELLED
 * result callback. Signals and the `state` query also work from the `temporal` CLI binary.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { temporal as proto } from '@temporalio/proto';
import { locateTemporalBinary } from '../../src/dev/temporal-binary';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { ActivityHold } from '../helpers/interceptors';
import { Receiver } from '../helpers/receiver';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SCHEMA = `
CREATE TYPE public.mood AS ENUM ('calm', 'busy');
CREATE TABLE public.orders (id bigint PRIMARY KEY, customer int NOT NULL, total numeric(10,2), mood public.mood DEFAULT 'calm');
INSERT INTO public.orders SELECT g, g % 97, g / 3.0, 'calm' FROM generate_series(1, 60000) g;
CREATE INDEX orders_customer ON public.orders (customer);
CREATE TABLE public.notes (id int PRIMARY KEY, body text);
INSERT INTO public.notes SELECT g, 'note ' || g FROM generate_series(1, 2000) g;
ANALYZE;`;

/** A pending activity whose cancellation Temporal has asked for. */
const CANCEL_REQUESTED = proto.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED;

interface Snapshot {
  source: string[];
  target: string[];
  orders: string[];
}

describe('cancellation', () => {
  let receiver: Receiver;
  let before: Snapshot;
  // Keeps the migration in the activity of the phase under test until the cancel reaches it.
  const hold = new ActivityHold();

  const snapshot = async (): Promise<Snapshot> => ({
    source: await objectInventory(suite.dbs, 'source'),
    target: await objectInventory(suite.dbs, 'target'),
    orders: await rowsAsText(suite.dbs, 'source', 'public.orders', 'id'),
  });

  /** The `temporal` CLI against the test's dev server (asynchronously: the worker runs in this process). */
  const temporal = async (...args: string[]): Promise<string> => {
    const { stdout } = await promisify(execFile)(locateTemporalBinary()!, [...args, '--address', suite.stack.server.address, '--namespace', suite.stack.server.namespace], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    return stdout;
  };

  const spec = (hook: string, extra: Record<string, unknown> = {}) => ({
    source: 'src',
    target: 'dst',
    batchRows: 2000,
    tables: [{ name: 'public.orders', chunks: 2 }, 'public.notes'],
    callback: { url: `${receiver.url}/${hook}` },
    ...extra,
  });

  /** Waits for the end, then checks the outcome, the callback and both databases. */
  async function expectCancelledAndClean(id: string, hook: string): Promise<void> {
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('CANCELLED');
    expect(result.callback).toEqual({ delivered: true });
    const calls = receiver.to(`/${hook}`).filter((d) => d.headers['idempotency-key'] === id);
    expect(calls).toHaveLength(1);
    expect(calls[0].json).toMatchObject({ task_id: id, state: 'CANCELLED' });
    expect(await snapshot()).toEqual(before);
    // The source still takes writes: no freeze, no capture trigger left behind.
    await suite.dbs.exec('source', "UPDATE public.orders SET mood = 'busy' WHERE id = 1; UPDATE public.orders SET mood = 'calm' WHERE id = 1");
  }

  const suite = stackSuite({
    name: 'cancel',
    databases: { source: SCHEMA, target: '' },
    connections: { src: 'source', dst: 'target' },
    workers: 0,
    // The receiver is on 127.0.0.1, a target workers refuse unless allowed.
    extraEnv: { FERRY_CALLBACK_ALLOW_PRIVATE: 'true' },
    ready: async ({ stack }) => {
      receiver = await Receiver.start();
      await stack.startWorker({ interceptors: hold.interceptors() });
      before = await snapshot();
    },
    cleanup: async () => {
      await receiver?.close();
    },
  });

  it('during preflight (the cancel signal sent with the temporal CLI)', async () => {
    const held = hold.arm('preflight');
    try {
      const { id } = await suite.stack.ferry.start(spec('preflight'), { id: 'cancel-preflight', skipPreflight: true });
      expect(await held).toMatchObject({ workflowId: id, activityType: 'preflight' });
      expect(await suite.stack.ferry.status(id)).toMatchObject({ state: 'RUNNING', phase: 'PENDING' });
      await temporal('workflow', 'signal', '--workflow-id', id, '--name', 'cancel', '--input', '{"reason":"wrong tables"}');
      await expectCancelledAndClean(id, 'preflight');
      expect((await suite.stack.ferry.result(id)).error?.message).toMatch(/wrong tables/);
    } finally {
      hold.disarm('preflight');
    }
  });

  it('during the copy (Temporal\'s own cancellation, `temporal workflow cancel`)', async () => {
    const { id } = await suite.stack.ferry.start(spec('copy'), { id: 'cancel-copy' });
    await suite.stack.ferry.throttle(id, { rowsPerSecond: 4000 });
    await eventually(async () => (await suite.dbs.query<{ n: number }>('target', 'SELECT count(*)::int AS n FROM public.orders').catch(() => [{ n: 0 }]))[0].n > 0);
    // The state query and the pause signal through the temporal CLI, as another program would.
    const state = JSON.parse(await temporal('workflow', 'query', '--workflow-id', id, '--type', 'state', '--output', 'json')) as {
      queryResult: [{ phase: string; tables: unknown[] }];
    };
    expect(state.queryResult[0].phase).toBe('FULL_MIGRATING');
    expect(state.queryResult[0].tables).toHaveLength(2);
    await temporal('workflow', 'signal', '--workflow-id', id, '--name', 'pause');
    await eventually(async () => (await suite.stack.ferry.status(id)).paused);
    await temporal('workflow', 'cancel', '--workflow-id', id);
    await expectCancelledAndClean(id, 'copy');
    const described = await suite.stack.client.workflow.getHandle(id).describe();
    expect(described.status.name).toBe('CANCELLED');
  });

  it('in the middle of a copy batch (`ferry cancel`), the chunks not a multiple of the batch', async () => {
    // 60,000 orders in two chunks of 30,000, batches of 7,000: each chunk ends on a short batch.
    const { id } = await suite.stack.ferry.start(spec('batch', { batchRows: 7000 }), { id: 'cancel-batch' });
    // Paced, so that batches are still to come once the first is seen committed: unpaced, the
    // copy finished in between on a busy CI run and no COPY was left to wait behind the lock.
    await suite.stack.ferry.throttle(id, { rowsPerSecond: 4000 });
    await eventually(async () => (await suite.dbs.query<{ n: number }>('target', 'SELECT coalesce(sum(rows_copied), 0)::int AS n FROM _ferry.checkpoints').catch(() => [{ n: 0 }]))[0].n > 0, 60_000, 50);
    // The next batch's COPY into the target waits behind this lock: a batch is in flight.
    const holder = new Client({ connectionString: suite.dbs.url('target') });
    await holder.connect();
    const waitingCopy = async () =>
      (
        await suite.dbs.query('target', `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'COPY "public"."orders"%FROM STDIN%'`)
      ).length > 0;
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE public.orders IN ACCESS EXCLUSIVE MODE');
      await eventually(waitingCopy, 30_000, 50);
      const cancel = await suite.stack.runCli(['cancel', id, '--reason', 'mid-batch']);
      expect(cancel.code).toBe(0);
      // The cancel reached the copy while a batch waits: its activity is asked to stop mid-batch.
      await eventually(async () => {
        const tables = await Promise.all([0, 1].map((i) => suite.stack.ferry.handle(`${id}/table-${i}`).describe().catch(() => undefined)));
        return tables.some((d) => (d?.raw.pendingActivities ?? []).some((a) => a.activityType?.name === 'copyChunk' && a.state === CANCEL_REQUESTED));
      }, 30_000, 50);
      await eventually(waitingCopy, 5_000, 50);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    }
    await expectCancelledAndClean(id, 'batch');
  });

  it('during validation (`ferry cancel`)', async () => {
    const held = hold.arm('validateChunk');
    try {
      const { id } = await suite.stack.ferry.start(spec('validate'), { id: 'cancel-validate' });
      expect((await held).workflowId).toMatch(new RegExp(`^${id}/table-`));
      expect((await suite.stack.ferry.status(id)).tables.map((t) => t.phase)).toContain('VALIDATING');
      const cancel = await suite.stack.runCli(['cancel', id, '--reason', 'maintenance window over']);
      expect(cancel.code).toBe(0);
      await expectCancelledAndClean(id, 'validate');
    } finally {
      hold.disarm('validateChunk');
    }
  });

  it('during incremental sync of an online migration', async () => {
    const held = hold.arm('syncChanges');
    try {
      const { id } = await suite.stack.ferry.start(spec('sync', { mode: 'online', cutover: { approval: 'manual', approvalTimeout: '10m' } }), { id: 'cancel-sync' });
      const table = Number((await held).workflowId.split('/table-')[1]);
      expect((await suite.stack.ferry.status(id)).tables[table].phase).toBe('INCR_SYNCING');
      await suite.dbs.exec('source', 'UPDATE public.notes SET body = body WHERE id <= 50'); // changes are being captured
      await suite.stack.ferry.cancel(id, 'sync test');
      await expectCancelledAndClean(id, 'sync');
    } finally {
      hold.disarm('syncChanges');
    }
  });

  it('while waiting for approval (the approveCutover gate), with the Temporal client\'s cancel', async () => {
    const { id } = await suite.stack.ferry.start(spec('approval', { mode: 'online', cutover: { approval: 'manual', approvalTimeout: '10m' } }), { id: 'cancel-approval' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    await suite.stack.client.workflow.getHandle(id).cancel();
    await expectCancelledAndClean(id, 'approval');
  });
});
