/** How a cutover's write outage was spent, from the migration's history (bench:online, bench:online-tables). */
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { tsToMs } from '@temporalio/common/lib/time';
import type { FerryClient } from '../src/client';

/**
 * Where a cutover's outage went, read from the migration's history: from the freeze flip to the
 * writers' wait done, every table asked to finish, the drain and dirty-row checks done (one
 * drainTables per group of tables; before the sealed drain, syncChanges and checkDirtyKeys per
 * table), and the target finished (the point of no return), in ms after the flip; and when the
 * last table workflow ended (before the sealed drain, inside the outage; now beside the drain,
 * and it may be past the point of no return); how long the drain's activities ran, and how long the
 * parent's workflow tasks inside the outage waited for a worker.
 */
export async function cutoverTimeline(ferry: FerryClient, id: string): Promise<string> {
  type Event = {
    eventId: string;
    eventTime: string;
    activityTaskScheduledEventAttributes?: { activityType?: { name?: string } };
    activityTaskStartedEventAttributes?: { scheduledEventId?: string };
    activityTaskCompletedEventAttributes?: { scheduledEventId?: string };
    childWorkflowExecutionCompletedEventAttributes?: unknown;
    externalWorkflowExecutionSignaledEventAttributes?: unknown;
    startChildWorkflowExecutionInitiatedEventAttributes?: { workflowId?: string };
    workflowTaskScheduledEventAttributes?: unknown;
    workflowTaskStartedEventAttributes?: unknown;
  };
  const { events } = JSON.parse(historyToJSON(await ferry.handle(id).fetchHistory())) as { events: Event[] };
  const scheduled = new Map<string, string>();
  const scheduledAt = new Map<string, number>();
  const queued = new Map<string, number>();
  const startedAt = new Map<string, number>();
  // Each drainTables activity: when it was scheduled and how long its (last) attempt ran.
  const drains: { scheduled: number; ran: number }[] = [];
  const done: { type: string; at: number }[] = [];
  const childrenEnded: number[] = [];
  const children: string[] = [];
  const signaled: number[] = [];
  // The parent's workflow tasks: when each was scheduled and how long it waited for a worker.
  const workflowTasks: { at: number; waited: number }[] = [];
  let taskScheduled = 0;
  for (const e of events) {
    const at = Date.parse(e.eventTime);
    if (e.workflowTaskScheduledEventAttributes) taskScheduled = at;
    if (e.workflowTaskStartedEventAttributes) workflowTasks.push({ at: taskScheduled, waited: at - taskScheduled });
    if (e.activityTaskScheduledEventAttributes) {
      scheduled.set(e.eventId, e.activityTaskScheduledEventAttributes.activityType?.name ?? '');
      scheduledAt.set(e.eventId, at);
    }
    const started = e.activityTaskStartedEventAttributes?.scheduledEventId;
    if (started) {
      queued.set(scheduled.get(started) ?? '', at - (scheduledAt.get(started) ?? at));
      startedAt.set(started, at);
    }
    const completed = e.activityTaskCompletedEventAttributes?.scheduledEventId;
    if (completed) {
      done.push({ type: scheduled.get(completed) ?? '', at });
      if (scheduled.get(completed) === 'drainTables') drains.push({ scheduled: scheduledAt.get(completed) ?? at, ran: at - (startedAt.get(completed) ?? at) });
    }
    if (e.childWorkflowExecutionCompletedEventAttributes) childrenEnded.push(at);
    if (e.externalWorkflowExecutionSignaledEventAttributes) signaled.push(at);
    const child = e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId;
    if (child) children.push(child);
  }
  // The flip is the setFreeze before the wait for writers (another one after the point of no return marks the source moved).
  const firstWait = done.find((d) => d.type === 'awaitWriters')?.at ?? Infinity;
  const flip = done.filter((d) => d.type === 'setFreeze' && d.at <= firstWait).at(-1)?.at ?? 0;
  const finished = done.find((d) => d.type === 'finishTarget' && d.at >= flip)?.at ?? Infinity;
  const last = (times: number[]) => Math.max(0, ...times.filter((t) => t >= flip && t <= finished));
  const ofType = (type: string) => last(done.filter((d) => d.type === type).map((d) => d.at));
  const after = (t: number) => (t > 0 ? `${t - flip} ms` : '—');
  const grouped = ofType('drainTables');
  const drain = grouped > 0 ? `drain and check ${after(grouped)}` : `drain ${after(ofType('syncChanges'))}, dirty check ${after(ofType('checkDirtyKeys'))}`;
  const tablesEnded = Math.max(0, ...childrenEnded.filter((t) => t >= flip));
  const ran = drains.map((d) => d.ran);
  const groups = drains.length > 0 ? `, ${drains.length} drain activities scheduled ${after(Math.min(...drains.map((d) => d.scheduled)))}, each ran ${Math.min(...ran)}–${Math.max(...ran)} ms` : '';
  const waits = ['awaitWriters', 'drainTables', 'finishTarget'].map((type) => `${type} ${queued.get(type) ?? '—'} ms`).join(', ');
  const tableSlices = await activitiesScheduledBetween(ferry, children, flip, finished);
  const outageTasks = workflowTasks.filter((t) => t.at >= flip && t.at <= finished).map((t) => t.waited);
  const parentTasks = `the parent's workflow tasks inside the outage: ${outageTasks.length}, waited for a worker ${outageTasks.reduce((a, b) => a + b, 0)} ms in all (the longest ${Math.max(0, ...outageTasks)} ms)`;
  return (
    `writers ${after(ofType('awaitWriters'))}, tables asked to finish ${after(last(signaled))}, ${drain}${groups}, ` +
    `finished ${after(ofType('finishTarget'))}; table workflows ended ${after(tablesEnded)}; waited for a worker slot (the last of each): ${waits}; ` +
    `the tables' own activities scheduled inside the outage: ${tableSlices}; ${parentTasks}`
  );
}

/** Activities the workflows `ids` (their latest runs) scheduled between `from` and `to`. */
async function activitiesScheduledBetween(ferry: FerryClient, ids: string[], from: number, to: number): Promise<number> {
  let count = 0;
  for (const id of ids) {
    const history = await ferry.handle(id).fetchHistory();
    for (const e of history.events ?? []) {
      if (!e.activityTaskScheduledEventAttributes) continue;
      const at = tsToMs(e.eventTime);
      if (at >= from && at <= to) count += 1;
    }
  }
  return count;
}

