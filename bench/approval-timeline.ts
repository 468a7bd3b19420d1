/** Where the time to approval of an online migration of many tables went, from its table workflows' histories (bench:online-tables). */
import { tsToMs } from '@temporalio/common/lib/time';
import type { FerryClient } from '../src/client';
import { readyTaskQueue, workflowIds } from '../src/core/names';

interface Tally {
  count: number;
  /** From each attempt's start to its completion or failure, summed. */
  ran: number;
  /** From each attempt's scheduling to its start (a worker slot), summed. */
  waited: number;
}

/**
 * Over every run of every table workflow of migration `id`, up to `until` (the approval): each
 * activity type's count, time run and time waited for a worker slot, summed (those of the ready
 * tables' queue apart); the timers' count and time slept; the workflow tasks' count and time
 * waited; and when the tables were given their copy slot (the median and the last, in s after `from`).
 */
export async function approvalTimeline(ferry: FerryClient, id: string, tables: number, from: number, until: number): Promise<string> {
  const activities = new Map<string, Tally>();
  let timers = 0;
  let slept = 0;
  let tasks = 0;
  let taskWait = 0;
  const copyGiven: number[] = [];
  for (const history of await tableHistories(ferry, id, tables)) {
    const scheduled = new Map<string, { type: string; at: number }>();
    const started = new Map<string, number>();
    const timerAt = new Map<string, number>();
    let taskScheduled = 0;
    for (const e of history.events ?? []) {
      const at = tsToMs(e.eventTime);
      if (at > until) break;
      const eventId = String(e.eventId);
      if (e.workflowTaskScheduledEventAttributes) taskScheduled = at;
      if (e.workflowTaskStartedEventAttributes) {
        tasks += 1;
        taskWait += at - taskScheduled;
      }
      if (e.workflowExecutionSignaledEventAttributes?.signalName === 'startCopy') copyGiven.push(at - from);
      const scheduling = e.activityTaskScheduledEventAttributes;
      if (scheduling) {
        const onReady = scheduling.taskQueue?.name === readyTaskQueue(ferry.config.taskQueue) ? ' (ready queue)' : '';
        scheduled.set(eventId, { type: `${scheduling.activityType?.name ?? '?'}${onReady}`, at });
      }
      const start = e.activityTaskStartedEventAttributes;
      if (start) {
        const s = scheduled.get(String(start.scheduledEventId));
        const tally = activities.get(s?.type ?? '?') ?? { count: 0, ran: 0, waited: 0 };
        tally.count += 1;
        tally.waited += at - (s?.at ?? at);
        activities.set(s?.type ?? '?', tally);
        started.set(String(start.scheduledEventId), at);
      }
      const end = e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes ?? e.activityTaskCanceledEventAttributes;
      if (end) {
        const s = scheduled.get(String(end.scheduledEventId));
        const tally = activities.get(s?.type ?? '?');
        if (tally) tally.ran += at - (started.get(String(end.scheduledEventId)) ?? at);
      }
      if (e.timerStartedEventAttributes) timerAt.set(eventId, at);
      if (e.timerFiredEventAttributes) {
        timers += 1;
        slept += at - (timerAt.get(String(e.timerFiredEventAttributes.startedEventId)) ?? at);
      }
    }
  }
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  const sorted = copyGiven.sort((a, b) => a - b);
  const byRun = [...activities].sort((a, b) => b[1].ran + b[1].waited - (a[1].ran + a[1].waited));
  return (
    `copy slots given: the median at ${s(sorted[Math.floor(sorted.length / 2)] ?? 0)}, the last at ${s(sorted.at(-1) ?? 0)}; ` +
    `the tables' activities (count, ran, waited for a slot): ${byRun.map(([type, t]) => `${type} ${t.count}, ${s(t.ran)}, ${s(t.waited)}`).join('; ')}; ` +
    `timers ${timers}, slept ${s(slept)}; workflow tasks ${tasks}, waited ${s(taskWait)}`
  );
}

/** Every run's history of each table workflow (a run continued as new names the run before it). */
async function tableHistories(ferry: FerryClient, id: string, tables: number) {
  const histories = [];
  for (let index = 0; index < tables; index += 1) {
    let runId: string | undefined;
    do {
      const history = await ferry.client.workflow.getHandle(workflowIds.table(id, index), runId).fetchHistory();
      histories.push(history);
      runId = history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId ?? undefined;
    } while (runId);
  }
  return histories;
}
