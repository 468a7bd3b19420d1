/**
 * How soon the dev server Ferry starts hands a migration's tasks to the worker. Its one history
 * shard reads new tasks at most 20 times a second under Temporal's own defaults
 * (`history.*ProcessorMaxPollRPS`), so a workflow whose tasks follow each other quickly waited up
 * to 50 ms for each; Ferry's dev server lifts that limit (DEV_SERVER_DYNAMIC_CONFIG).
 *
 * A comparison with Temporal's defaults cannot tell under CI load (the load spaces tasks out
 * further than the limiter does), so this test shows the two links of the chain separately, each
 * whatever the load: those settings are what paces dispatch (a server with them at 2 a second
 * makes every task after the limiter's burst wait hundreds of milliseconds), and Ferry's dev
 * server really runs with them lifted (its command line).
 */
import { readFileSync } from 'node:fs';
import { temporal } from '@temporalio/proto';
import { DEV_SERVER_DYNAMIC_CONFIG, shardReadRates } from '../../src/dev/dev-server';
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

/** The server process's arguments, as the kernel holds them. */
function commandLine(stack: TestStack): string[] {
  const pid = stack.server.process?.pid;
  if (pid === undefined) throw new Error('the dev server was not started as a child process');
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
}

/** The `--dynamic-config-value` settings on a command line, by key. */
function dynamicConfigOf(args: string[]): Record<string, string> {
  const values: Record<string, string> = {};
  args.forEach((arg, i) => {
    if (arg !== '--dynamic-config-value') return;
    const [key, ...value] = args[i + 1].split('=');
    values[key] = value.join('=');
  });
  return values;
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

describe('task dispatch on the dev server Ferry starts', () => {
  const suite = stackSuite({
    name: 'dispatch',
    databases: { source: seedSql(accounts(300)), target: '', target_paced: '' },
    connections: { src: 'source', tgt: 'target' },
    workers: 1,
    // Its command line is read: a server of its own, not the run's shared one.
    ownServer: true,
  });

  it('runs with the shard read rates lifted, the settings that pace how soon a task reaches the worker', async () => {
    const spec = { source: 'src', target: 'tgt', tables: ['public.accounts'], validation: 'none' };
    const ours = await suite.stack.ferry.start(spec, { id: 'dispatch-ferry' });
    expect((await suite.stack.ferry.result(ours.id)).state).toBe('SUCCEEDED');
    const settings = dynamicConfigOf(commandLine(suite.stack));
    expect(settings).toMatchObject({ 'history.transferProcessorMaxPollRPS': '1000', 'history.timerProcessorMaxPollRPS': '1000' });
    expect(Object.keys(DEV_SERVER_DYNAMIC_CONFIG).sort()).toEqual(['history.timerProcessorMaxPollRPS', 'history.transferProcessorMaxPollRPS']);

    // The same keys at 2 reads a second: once the limiter's burst is spent, a task waits until the
    // next read, up to 500 ms, however loaded the machine.
    const paced = await TestStack.start({
      connections: { src: suite.dbs.url('source'), tgt: suite.dbs.url('target_paced') },
      workers: 1,
      server: { dynamicConfig: shardReadRates(2) },
    });
    try {
      expect(dynamicConfigOf(commandLine(paced))['history.transferProcessorMaxPollRPS']).toBe('2');
      const theirs = await paced.ferry.start(spec, { id: 'dispatch-paced' });
      expect((await paced.ferry.result(theirs.id)).state).toBe('SUCCEEDED');
      const withPacing = await dispatchWaits(paced, theirs.id);
      const withFerry = await dispatchWaits(suite.stack, ours.id);
      const slow = (xs: number[]) => xs.filter((ms) => ms >= 200).length;
      console.log(
        `dispatch waits over ${withFerry.length} / ${withPacing.length} tasks: ${sum(withFerry)} ms in all (${slow(withFerry)} of 200 ms or more) on Ferry's dev server, ` +
          `${sum(withPacing)} ms (${slow(withPacing)}) with the shard read at 2 a second`,
      );
      expect(withFerry.length).toBeGreaterThan(10);
      expect(slow(withPacing)).toBeGreaterThanOrEqual(5);
      expect(sum(withFerry) * 2).toBeLessThan(sum(withPacing));
    } finally {
      await paced.teardown();
    }
  }, 180_000);
});
