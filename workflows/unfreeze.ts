/**
 * unfreezeWorkflow: a short helper for `ferry unfreeze ID` after a migration has ended — the
 * workers hold the connections, so lifting the freeze on the source runs as an activity there.
 */
import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';

const { unfreezeSource } = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 10 },
});

export async function unfreezeWorkflow(migrationId: string, source: string): Promise<{ unfrozen: string[]; pending?: string[] }> {
  return unfreezeSource({ migrationId, source });
}
