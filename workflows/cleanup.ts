/**
 * cleanupWorkflow: removes what a migration left on the source once it no longer needs it —
 * capture (its triggers, functions and logs) and, unless the tables stay frozen, the freeze.
 * Started in the background when a cutover or a rollback could not drop everything at once (a
 * long reader holds a table's lock), and by `ferry cleanup` — which for a migration that did not
 * succeed also names the target, so that what it created there goes too, as its rollback would
 * have done (onFailure: keep skipped that). It retries with growing pauses until nothing is
 * left. Each attempt queues for a table's lock only briefly, so the application hardly notices.
 */
import { continueAsNew, ParentClosePolicy, proxyActivities, sleep, startChild } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { workflowIds } from '../src/names';

const { setFreeze, releaseSource, dropTargetObjects } = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '20 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 5 },
});

export interface CleanupInput {
  migrationId: string;
  source: string;
  /** keep: the tables stay frozen (keep-frozen cutover); remove: writes pass, the freeze goes too. */
  freeze: 'keep' | 'remove';
  /** Also drop what the migration created on this target connection, and its bookkeeping there. */
  target?: string;
  /** Attempts so far, carried across continue-as-new. */
  attempts?: number;
}

export interface CleanupResult {
  attempts: number;
  /** What was dropped on the target (when the input named one). */
  dropped?: string[];
}

const FIRST_PAUSE_MS = 5_000;
const LONGEST_PAUSE_MS = 10 * 60_000;
const ATTEMPTS_PER_RUN = 100;

export async function cleanupWorkflow(input: CleanupInput): Promise<CleanupResult> {
  const ref = { migrationId: input.migrationId, source: input.source };
  let attempts = input.attempts ?? 0;
  for (let run = 0; run < ATTEMPTS_PER_RUN; run += 1) {
    attempts += 1;
    try {
      // The state first: writes pass again (or read "moved") even while triggers remain.
      await setFreeze({ ...ref, state: input.freeze === 'remove' ? 'released' : 'moved' }).catch(() => undefined);
      const { pending } = await releaseSource({ ...ref, freeze: input.freeze });
      if (pending.length === 0) {
        if (!input.target) return { attempts };
        const { dropped } = await dropTargetObjects({ migrationId: input.migrationId, target: input.target });
        return { attempts, dropped };
      }
    } catch {
      // A database that cannot be reached now may be reachable later.
    }
    await sleep(Math.min(LONGEST_PAUSE_MS, FIRST_PAUSE_MS * 2 ** Math.min(attempts - 1, 10)));
  }
  return continueAsNew<typeof cleanupWorkflow>({ ...input, attempts });
}

/**
 * Starts the background cleanup of a migration's source, detached from the migration (it
 * outlives it). Returns a warning for the migration's result.
 */
export async function cleanUpInBackground(input: CleanupInput, leftovers: string[]): Promise<string> {
  const workflowId = workflowIds.cleanup(input.migrationId);
  try {
    await startChild(cleanupWorkflow, { workflowId, parentClosePolicy: ParentClosePolicy.ABANDON, args: [input] });
  } catch {
    return `capture could not be removed from the source (${leftovers.join('; ')}) and its background cleanup did not start: run \`ferry cleanup ${input.migrationId}\` once the tables' locks are free`;
  }
  return `capture could not be removed from the source yet (${leftovers.join('; ')}): it no longer records anything and is removed in the background by workflow ${workflowId}`;
}
