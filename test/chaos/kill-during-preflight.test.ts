/**
 * SIGKILL the `ferry worker` that runs preflight while `ferry start` waits for it. Preflight
 * heartbeats, so Temporal notices the lost worker by the heartbeat timeout and runs preflight
 * again on the other worker; `ferry start` returns and the migration copies everything. (Before
 * preflight had a heartbeat timeout, only its 5-minute start-to-close timeout noticed, and
 * `ferry start` hung that long — found by random-kills.test.ts.)
 */
import { temporal } from '@temporalio/proto';
import { Client } from 'pg';
import { compareTable, snapshotWork } from '../helpers/chaos';
import { eventually, resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { expectCleanRun } from '../helpers/repairs';

describe('a worker killed with SIGKILL during preflight', () => {
  const suite = stackSuite({
    name: 'killpre',
    databases: {
      source: `CREATE TABLE public.orders (id bigint PRIMARY KEY, customer int NOT NULL, total numeric(12,2));
       INSERT INTO public.orders SELECT g, g % 311, g / 7.0 FROM generate_series(1, 5000) g;
       ANALYZE;`,
      target: '',
    },
    connections: { old: 'source', new: 'target' },
    workers: 0,
  });

  it('is noticed by the heartbeat timeout: preflight runs again on the other worker and the migration completes', async () => {
    const workers = await Promise.all([suite.stack.startWorkerProcessReady('w1'), suite.stack.startWorkerProcessReady('w2')]);
    // An application transaction holding the table keeps preflight's read of it waiting (for
    // less than the session's 5 s lock_timeout): long enough to see which worker runs it.
    const app = new Client({ connectionString: suite.dbs.url('source') });
    await app.connect();
    await app.query('BEGIN');
    await app.query('LOCK TABLE public.orders IN ACCESS EXCLUSIVE MODE');
    const id = 'kill-during-preflight';
    const starting = suite.stack.ferry.start({ source: 'old', target: 'new', tables: ['public.orders'] }, { id });
    starting.catch(() => undefined);
    let running;
    try {
      running = await eventually(async () => (await snapshotWork(suite.stack.ferry, id, false)).running.find((a) => a.activity === 'preflight'), 4_000, 50);
      const victim = workers.find((w) => w.identity === running!.worker)!;
      victim.process.kill('SIGKILL');
      await victim.exited;
      expect(victim.process.signalCode).toBe('SIGKILL');
    } finally {
      await app.query('ROLLBACK');
      await app.end();
    }

    await starting;
    const result = await resultWithin(suite.stack.ferry, id, 60_000);
    expect(result.state).toBe('SUCCEEDED');
    const cmp = await compareTable(suite.dbs, 'source', 'target', 'public.orders', 'id');
    expect({ equal: cmp.equal, rows: cmp.targetRows, duplicateKeys: cmp.duplicateKeys }).toEqual({ equal: true, rows: 5000, duplicateKeys: 0 });
    await expectCleanRun(suite.stack.ferry, result);

    // The preflight that finished was a retry after a heartbeat timeout, on the surviving worker.
    const history = await suite.stack.client.workflow.getHandle(running.workflowId).fetchHistory();
    const started = (history.events ?? []).map((e) => e.activityTaskStartedEventAttributes).filter((a) => a);
    expect(started).toHaveLength(1);
    expect(started[0]!.attempt).toBeGreaterThanOrEqual(2);
    expect(started[0]!.identity).not.toBe(running.worker);
    expect(started[0]!.lastFailure?.timeoutFailureInfo?.timeoutType).toBe(temporal.api.enums.v1.TimeoutType.TIMEOUT_TYPE_HEARTBEAT);
  }, 120_000);
});
