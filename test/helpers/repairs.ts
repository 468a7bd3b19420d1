/**
 * Validation's repair is a safety net: a run nobody damaged must not need it, or a loss that it
 * quietly mended would pass every row-for-row comparison afterwards. Every such run asserts it,
 * from the result and, where the event list may be capped, from the table workflows themselves.
 */
import { Client, WorkflowNotFoundError } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { FerryClient } from '../../src/client';
import type { ResultDocument } from '../../src/core/status';
import type { TableWorkflowResult } from '../../workflows/migration/table';
import type { TestDatabases } from './databases';

/** The activities that mend a difference validation found: a range copied again, keys put back into the log. */
export const REPAIR_ACTIVITIES = ['repairRange', 'enqueueKeys'];

/**
 * Every table was validated (a ValidationPassed of its own, in full and online mode alike) and
 * none needed a range repaired: the copy and the sync alone made the target equal.
 */
export function expectNothingRepaired(result: ResultDocument): void {
  const passed = result.events.filter((e) => e.type === 'ValidationPassed');
  expect(passed.map((e) => e.table).sort()).toEqual(result.tables.map((t) => t.source).sort());
  expect(passed.map((e) => ({ table: e.table, repairedRanges: e.detail?.repairedRanges }))).toEqual(passed.map((e) => ({ table: e.table, repairedRanges: 0 })));
}

/**
 * A run's history, read a hundred events a page: a page of fetchHistory's default size outgrows
 * the client's 4 MB message limit in a migration of thousands of tables (planTables pages, groups).
 */
export async function historyEvents(client: Client, workflowId: string, runId?: string): Promise<temporal.api.history.v1.IHistoryEvent[]> {
  const events: temporal.api.history.v1.IHistoryEvent[] = [];
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await client.workflowService.getWorkflowExecutionHistory({
      namespace: client.options.namespace,
      execution: { workflowId, runId },
      maximumPageSize: 100,
      nextPageToken,
    });
    events.push(...(page.history?.events ?? []));
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);
  return events;
}

/** The activity types a workflow scheduled, over every run of it (continue-as-new included), newest run first. */
export async function scheduledActivities(client: Client, workflowId: string): Promise<string[]> {
  const types: string[] = [];
  let runId: string | undefined;
  for (;;) {
    const events = await historyEvents(client, workflowId, runId);
    for (const event of events) {
      const name = event.activityTaskScheduledEventAttributes?.activityType?.name;
      if (name) types.push(name);
    }
    runId = events[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId ?? undefined;
    if (!runId) return types;
  }
}

/**
 * What validation had to mend in a finished run, as the result's events (capped in number) and the
 * workflows themselves tell it: ValidationPassed events with repaired ranges, a table workflow
 * whose own result reports repaired ranges, and any run of a table or of the parent that scheduled
 * a repair. Empty for a run that needed none.
 */
export async function repairsFound(ferry: FerryClient, result: ResultDocument): Promise<string[]> {
  const found = result.events.filter((e) => e.type === 'ValidationPassed' && e.detail?.repairedRanges !== 0).map((e) => `${e.table}: ValidationPassed ${JSON.stringify(e.detail)}`);
  const id = result.task_id;
  // Every table's workflow (a small table copied in a group has none: its group's activity
  // repairs nothing, and a table that differs gets its workflow, checked here): by the result's
  // tables, and — since a result of thousands lists only some (tablesOmitted) — those the
  // parent's history started.
  const listed = result.tablesOmitted ? [] : result.tables.map((_, index) => `${id}/table-${index}`);
  for (const workflowId of new Set([...listed, ...(await tableWorkflows(ferry.client, id))])) {
    const own = (await ferry.client.workflow
      .getHandle(workflowId)
      .result()
      .catch((err: unknown) => (err instanceof WorkflowNotFoundError ? null : Promise.reject(err)))) as TableWorkflowResult | null;
    if (own === null) continue;
    const table = result.tablesOmitted ? workflowId : (result.tables[Number(workflowId.slice(`${id}/table-`.length))]?.source ?? workflowId);
    if (own.repairedRanges !== 0) found.push(`${table}: ${own.repairedRanges} range(s) repaired`);
    const repairs = (await scheduledActivities(ferry.client, workflowId)).filter((a) => REPAIR_ACTIVITIES.includes(a));
    if (repairs.length > 0) found.push(`${table}: ${repairs.join(', ')} scheduled`);
  }
  const parent = (await scheduledActivities(ferry.client, id)).filter((a) => REPAIR_ACTIVITIES.includes(a));
  if (parent.length > 0) found.push(`${id}: ${parent.join(', ')} scheduled`);
  return found;
}

/** The table workflows (`<id>/table-<n>`) a migration's parent started. */
async function tableWorkflows(client: Client, id: string): Promise<string[]> {
  const events = await historyEvents(client, id);
  return events.map((e) => e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId ?? '').filter((w) => w.startsWith(`${id}/table-`));
}

/** A run that needed no repair, by every account of it (repairsFound). */
export async function expectCleanRun(ferry: FerryClient, result: ResultDocument): Promise<void> {
  expect(await repairsFound(ferry, result)).toEqual([]);
}

/** Row writes PostgreSQL counted on a table (its statistics, flushed by each session within seconds). */
export interface TupleWrites {
  inserted: number;
  updated: number;
  deleted: number;
}

export async function tupleWrites(dbs: TestDatabases, role: string, table: string): Promise<TupleWrites> {
  const [row] = await dbs.query<{ ins: string; upd: string; del: string }>(
    role,
    `SELECT n_tup_ins AS ins, n_tup_upd AS upd, n_tup_del AS del FROM pg_stat_user_tables WHERE relid = $1::regclass`,
    [table],
  );
  return { inserted: Number(row.ins), updated: Number(row.upd), deleted: Number(row.del) };
}

/**
 * An online table's copy and sync, checked against what the target's statistics counted: the copy
 * inserted at least the rows it reports (no batch counted that was not written), at least
 * `untouched` rows (those no writer ever changed, which only the copy can bring), and the sync
 * wrote the target beyond the copy (the writers' changes arrived through it, not by repair).
 * Statistics reach the shared counters a few seconds after a session's writes: waited for.
 */
export async function copiedAndApplied(dbs: TestDatabases, target: string, table: string, rowsCopied: number, untouched: number): Promise<string | undefined> {
  const deadline = Date.now() + 30_000;
  let last = '';
  for (;;) {
    const w = await tupleWrites(dbs, target, table);
    const synced = w.inserted - rowsCopied + w.updated + w.deleted;
    if (rowsCopied >= untouched && w.inserted >= rowsCopied && synced > 0) return undefined;
    last = `${table}: rowsCopied ${rowsCopied} (untouched rows ${untouched}), target counted ${JSON.stringify(w)}`;
    if (Date.now() >= deadline) return last;
    await new Promise((r) => setTimeout(r, 500));
  }
}
