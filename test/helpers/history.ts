/** Reads real workflow histories: which worker started which activity, on which attempt, and what they hold. */
import { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { temporal } from '@temporalio/proto';
import { eventually } from './stack';

export interface ActivityStart {
  activityType: string;
  identity: string;
  attempt: number;
}

/** activityStarts over every run of a workflow, continue-as-new included (newest run first). */
export async function activityStartsAllRuns(client: Client, workflowId: string): Promise<ActivityStart[]> {
  const starts: ActivityStart[] = [];
  let runId: string | undefined;
  for (;;) {
    starts.push(...(await activityStarts(client, workflowId, runId)));
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    runId = history.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId ?? undefined;
    if (!runId) return starts;
  }
}

/** The events of a workflow's run (its current one unless `runId`), and the activity type of each scheduled event id. */
async function eventsOf(client: Client, workflowId: string, runId?: string): Promise<{ events: temporal.api.history.v1.IHistoryEvent[]; scheduled: Map<string, string> }> {
  const events = (await client.workflow.getHandle(workflowId, runId).fetchHistory()).events ?? [];
  const scheduled = new Map<string, string>();
  for (const e of events) if (e.activityTaskScheduledEventAttributes) scheduled.set(String(e.eventId), e.activityTaskScheduledEventAttributes.activityType?.name ?? '');
  return { events, scheduled };
}

export async function activityStarts(client: Client, workflowId: string, runId?: string): Promise<ActivityStart[]> {
  const { events, scheduled } = await eventsOf(client, workflowId, runId);
  const starts: ActivityStart[] = [];
  for (const event of events) {
    const st = event.activityTaskStartedEventAttributes;
    if (st) {
      starts.push({
        activityType: scheduled.get(String(st.scheduledEventId)) ?? '',
        identity: st.identity ?? '',
        attempt: st.attempt ?? 1,
      });
    }
  }
  return starts;
}

export interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

export interface FoundPayload {
  workflowId: string;
  path: string;
  payload: JsonPayload;
}

export const unb64 = (s: string | undefined) => Buffer.from(s ?? '', 'base64').toString('utf8');

/** Every Payload in a history's proto JSON, with the path it sits at. */
export function payloadsIn(node: unknown, workflowId: string, path = '', out: FoundPayload[] = []): FoundPayload[] {
  if (Array.isArray(node)) node.forEach((n, i) => payloadsIn(n, workflowId, `${path}[${i}]`, out));
  else if (node && typeof node === 'object') {
    const obj = node as Record<string, unknown>;
    const metadata = obj.metadata as Record<string, unknown> | undefined;
    if (metadata && typeof metadata === 'object' && typeof metadata.encoding === 'string') out.push({ workflowId, path, payload: obj as JsonPayload });
    else for (const [k, v] of Object.entries(obj)) payloadsIn(v, workflowId, path ? `${path}.${k}` : k, out);
  }
  return out;
}

/**
 * The forms a secret could take in stored bytes: itself, and base64 at each of the three
 * alignments it can have inside a longer base64 string (payload data is stored base64).
 */
export function encodedForms(secret: string): string[] {
  const forms = [secret, encodeURIComponent(secret)];
  for (let shift = 0; shift < 3; shift += 1) {
    const encoded = Buffer.from('x'.repeat(shift) + secret).toString('base64');
    // Drop the characters that also depend on the neighbouring bytes.
    const start = shift === 0 ? 0 : shift + 1;
    const end = encoded.replace(/=+$/, '').length - 2;
    forms.push(encoded.slice(start, end));
  }
  return forms;
}

/** Which of the secrets appear in the text, in which form. */
export function hitsIn(corpus: string, secrets: Record<string, string>): string[] {
  const hits: string[] = [];
  for (const [label, secret] of Object.entries(secrets)) {
    for (const form of encodedForms(secret)) if (corpus.includes(form)) hits.push(`${label} as ${form === secret ? 'plaintext' : form}`);
  }
  return hits;
}

/**
 * Every closed execution whose workflow id starts with `prefix` (a migration, its table
 * children, its preflight), as one text: each history's proto JSON, followed by its payloads
 * decoded from base64. Visibility trails the histories a little, hence the wait for `expected`.
 */
export async function historiesText(client: Client, prefix: string, expected: number): Promise<{ types: string[]; text: string }> {
  const infos = await eventually(async () => {
    const found: WorkflowExecutionInfo[] = [];
    for await (const info of client.workflow.list({ query: `WorkflowId STARTS_WITH '${prefix}'` })) found.push(info);
    return found.length >= expected && found.every((i) => i.closeTime) && found;
  }, 20_000);
  const parts: string[] = [];
  for (const info of infos) {
    const history = historyToJSON(await client.workflow.getHandle(info.workflowId, info.runId).fetchHistory());
    parts.push(history);
    for (const { payload } of payloadsIn(JSON.parse(history), info.workflowId)) parts.push(unb64(payload.data));
  }
  return { types: infos.map((i) => i.type).sort(), text: parts.join('\n') };
}

/** A workflow's activities' inputs and results (its current run), by activity type, as JSON. */
export async function activityPayloads(client: Client, id: string) {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- read back as the tests need them
  const inputs: Record<string, any[]> = {};
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const results: Record<string, any[]> = {};
  // (An activity that returns nothing has a payload without data.)
  const json = (p: { data?: Uint8Array | null } | undefined) => (p?.data?.length ? JSON.parse(Buffer.from(p.data).toString('utf8')) : null);
  const { events, scheduled: types } = await eventsOf(client, id);
  for (const e of events) {
    const scheduled = e.activityTaskScheduledEventAttributes;
    if (scheduled) (inputs[scheduled.activityType?.name ?? ''] ??= []).push(json(scheduled.input?.payloads?.[0]));
    const completed = e.activityTaskCompletedEventAttributes;
    if (completed) {
      const type = types.get(String(completed.scheduledEventId)) ?? '';
      (results[type] ??= []).push(json(completed.result?.payloads?.[0]));
    }
  }
  return { inputs, results };
}

/**
 * A workflow's steps in the order its history holds them: `done:<activity type>` for each
 * completed activity, `signal:<name>` for each signal it sent to another workflow.
 */
export async function historySteps(client: Client, workflowId: string): Promise<string[]> {
  const { events, scheduled } = await eventsOf(client, workflowId);
  const steps: string[] = [];
  for (const event of events) {
    const done = event.activityTaskCompletedEventAttributes;
    if (done) steps.push(`done:${scheduled.get(String(done.scheduledEventId)) ?? ''}`);
    const signal = event.signalExternalWorkflowExecutionInitiatedEventAttributes;
    if (signal) steps.push(`signal:${signal.signalName ?? ''}`);
  }
  return steps;
}

/** The task queues each activity type of a workflow was scheduled on (distinct, in order of first use). */
export async function activityQueues(client: Client, workflowId: string): Promise<Map<string, string[]>> {
  const { events } = await eventsOf(client, workflowId);
  const queues = new Map<string, string[]>();
  for (const event of events) {
    const s = event.activityTaskScheduledEventAttributes;
    if (!s) continue;
    const type = s.activityType?.name ?? '';
    const queue = s.taskQueue?.name ?? '';
    const seen = queues.get(type) ?? [];
    if (!seen.includes(queue)) queues.set(type, [...seen, queue]);
  }
  return queues;
}
