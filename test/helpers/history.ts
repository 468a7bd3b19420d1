/** Reads real workflow histories: which worker started which activity, on which attempt. */
import { Client } from '@temporalio/client';

export interface ActivityStart {
  activityType: string;
  identity: string;
  attempt: number;
}

export async function activityStarts(client: Client, workflowId: string, runId?: string): Promise<ActivityStart[]> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  const scheduled = new Map<string, string>();
  const starts: ActivityStart[] = [];
  for (const event of history.events ?? []) {
    const s = event.activityTaskScheduledEventAttributes;
    if (s) scheduled.set(String(event.eventId), s.activityType?.name ?? '');
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
