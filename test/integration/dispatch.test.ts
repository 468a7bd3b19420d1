/**
 * How soon the dev server Ferry starts hands a migration's tasks to the worker. Its one history
 * shard reads new tasks at most 20 times a second under Temporal's own defaults, so a workflow
 * whose tasks follow each other quickly waits up to 50 ms for each; Ferry's dev server lifts that
 * limit (DEV_SERVER_DYNAMIC_CONFIG). The same migration runs against a dev server with Temporal's
 * defaults put back, and each task's wait between scheduled and started is read from the histories.
 */
import { temporal } from '@temporalio/proto';
import { TEMPORAL_DEFAULT_DYNAMIC_CONFIG } from '../../src/dev/dev-server';
import { accounts, seedSql } from '../fixtures/seeds';
import { TestStack } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const { EventType } = temporal.api.enums.v1;

/** Milliseconds from each workflow or activity task's scheduling to its start, over the migration and its table. */
async function dispatchWaits(stack: TestStack, id: string): Promise<number[]> {
  const waits: number[] = [];
  for (const workflowId of [id, `${id}/table-0`]) {
    const events = (await stack.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
    const ms = (e: temporal.api.history.v1.IHistoryEvent) => Number(e.eventTime!.seconds) * 1000 + Math.floor((e.eventTime!.nanos ?? 0) / 1e6);
    const scheduled = new Map(events.map((e) => [Number(e.eventId), ms(e)]));
    for (const e of events) {
      const from =
        e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
          ? e.activityTaskStartedEventAttributes?.scheduledEventId
          : e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
            ? e.workflowTaskStartedEventAttributes?.scheduledEventId
            : undefined;
      if (from !== undefined && from !== null) waits.push(ms(e) - scheduled.get(Number(from))!);
    }
  }
  return waits;
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

describe('task dispatch on the dev server Ferry starts', () => {
  const suite = stackSuite({
    name: 'dispatch',
    databases: { source: seedSql(accounts(3000)), target: '', target_defaults: '' },
    connections: { src: 'source', tgt: 'target' },
    workers: 1,
  });

  it("hands a migration's tasks to the worker without the default 20-reads-a-second pacing", async () => {
    const spec = { source: 'src', target: 'tgt', tables: [{ name: 'public.accounts', chunks: 3 }], batchRows: 500, validation: 'checksum' };
    const ours = await suite.stack.ferry.start(spec, { id: 'dispatch-ferry' });
    expect((await suite.stack.ferry.result(ours.id)).state).toBe('SUCCEEDED');

    const defaults = await TestStack.start({
      connections: { src: suite.dbs.url('source'), tgt: suite.dbs.url('target_defaults') },
      workers: 1,
      server: { dynamicConfig: TEMPORAL_DEFAULT_DYNAMIC_CONFIG },
    });
    try {
      const theirs = await defaults.ferry.start(spec, { id: 'dispatch-defaults' });
      expect((await defaults.ferry.result(theirs.id)).state).toBe('SUCCEEDED');
      const withDefaults = await dispatchWaits(defaults, theirs.id);
      const withFerry = await dispatchWaits(suite.stack, ours.id);
      const slow = (xs: number[]) => xs.filter((ms) => ms >= 30).length;
      console.log(
        `dispatch waits over ${withFerry.length} / ${withDefaults.length} tasks: ${sum(withFerry)} ms in all (${slow(withFerry)} of 30 ms or more) on Ferry's dev server, ` +
          `${sum(withDefaults)} ms (${slow(withDefaults)}) with Temporal's defaults`,
      );
      expect(withFerry.length).toBeGreaterThan(20);
      // Paced at 20 reads a second once the limiter's burst is spent (the migration's last steps,
      // one after another), a task waits 30–50 ms; unpaced, a few. A loaded machine adds to both,
      // and spaces the tasks out so that the limiter refills: 10–13 paced waits on a quiet machine,
      // 4 in a CI run. The pacing must show at least once for the comparison to mean anything.
      expect(slow(withDefaults)).toBeGreaterThanOrEqual(1);
      expect(sum(withFerry) * 2).toBeLessThan(sum(withDefaults));
    } finally {
      await defaults.teardown();
    }
  }, 120_000);
});
