/**
 * The worker pool: several workers share the task queue and a migration's chunks spread over
 * them. Each worker takes one activity at a time, so two chunks copying together must run on
 * two workers; the history records who ran what. A worker that cannot be made whole lets go of
 * what it made.
 */
import { Worker } from '@temporalio/worker';
import { readyTaskQueue } from '../../src/core/names';
import { rowsAsText } from '../helpers/databases';
import { activityStarts } from '../helpers/history';
import { stackSuite } from '../helpers/suite';

describe('a pool of two workers', () => {
  const suite = stackSuite({
    name: 'pool',
    databases: {
      source: `CREATE TABLE public.events (id bigint PRIMARY KEY, payload text);
      INSERT INTO public.events SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 40000) g; ANALYZE;`,
      target: '',
    },
    connections: { a: 'source', b: 'target' },
    workers: 0,
  });

  it('shares one migration\'s chunks between both workers', async () => {
    // Queue the migration and slow it down before any worker runs, so chunks overlap in time.
    const { id } = await suite.stack.ferry.start(
      { source: 'a', target: 'b', batchRows: 1000, parallelism: { tables: 1, chunks: 2 }, tables: [{ name: 'public.events', chunks: 4 }] },
      { id: 'pool', skipPreflight: true },
    );
    await suite.stack.ferry.throttle(id, { rowsPerSecond: 40_000 });
    await suite.stack.startWorker({ activitySlots: 1 });
    await suite.stack.startWorker({ activitySlots: 1 });

    const result = await suite.stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');
    expect(await rowsAsText(suite.dbs, 'target', 'public.events', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.events', 'id'));
    const copiers = new Set((await activityStarts(suite.stack.client, `${id}/table-0`)).filter((s) => s.activityType === 'copyChunk').map((s) => s.identity));
    expect([...copiers].sort()).toEqual(['in-process-1', 'in-process-2']);
  });

  it('lets go of the workers it made when the one on its ready queue cannot be made: the cause is thrown, none is left holding the connection', async () => {
    // The failure is injected (Temporal's Worker.create refuses nothing a valid queue name
    // passes); the workers made before it are real, on a queue of their own.
    const queue = `${suite.stack.taskQueue}-unmade`;
    const made: Worker[] = [];
    const create = Worker.create.bind(Worker);
    const spy = jest.spyOn(Worker, 'create').mockImplementation(async (options) => {
      if (options.taskQueue === readyTaskQueue(queue)) throw new Error("the ready queue's worker could not be made");
      const worker = await create(options);
      made.push(worker);
      return worker;
    });
    try {
      await expect(suite.stack.startWorker({ taskQueue: queue })).rejects.toThrow("the ready queue's worker could not be made");
    } finally {
      spy.mockRestore();
    }
    // The main queue's worker and the cutover queue's, run down (a Worker never run holds its connection).
    expect(made.map((w) => w.getState())).toEqual(['STOPPED', 'STOPPED']);
  });

  it('obeys a worker-wide activity rate cap (ferry worker --max-activities-per-second)', async () => {
    await suite.stack.stopInProcessWorkers();
    await suite.dbs.exec('target', 'DROP TABLE IF EXISTS public.events');
    await suite.stack.startWorkerProcessReady('capped', ['--max-activities-per-second', '2']);
    const { id } = await suite.stack.ferry.start(
      { source: 'a', target: 'b', batchRows: 1000, validation: 'count', tables: [{ name: 'public.events', chunks: 4 }] },
      { id: 'capped', skipPreflight: true },
    );
    expect((await suite.stack.ferry.result(id)).state).toBe('SUCCEEDED');
    // Every activity task start of the migration and its table, in time order.
    const starts: number[] = [];
    for (const workflowId of [id, `${id}/table-0`]) {
      for (const e of (await suite.stack.client.workflow.getHandle(workflowId).fetchHistory()).events ?? []) {
        if (e.activityTaskStartedEventAttributes && e.eventTime?.seconds != null) {
          starts.push(Number(e.eventTime.seconds) * 1000 + Math.floor((e.eventTime.nanos ?? 0) / 1e6));
        }
      }
    }
    starts.sort((x, y) => x - y);
    expect(starts.length).toBeGreaterThanOrEqual(8); // preflight, prepare, 4 copies, 4 validations, finalize…
    const perSecond = (starts.length - 1) / ((starts[starts.length - 1] - starts[0]) / 1000);
    expect(perSecond).toBeLessThanOrEqual(2.5);
  });
});
