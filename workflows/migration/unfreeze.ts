/**
 * unfreezeWorkflow: a short helper for `ferry unfreeze ID` after a migration has ended — the
 * workers hold the connections, so lifting the freeze on the source runs as an activity there.
 */
import { helperActivities } from '../activity-options';

const { unfreezeSource } = helperActivities.unfreeze;

export async function unfreezeWorkflow(migrationId: string, source: string): Promise<{ unfrozen: string[]; pending?: string[] }> {
  return unfreezeSource({ migrationId, source });
}
