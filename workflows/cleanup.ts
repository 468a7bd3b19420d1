/**
 * cleanupWorkflow: removes what a migration left behind once nothing needs it any more.
 *   - In the background, after a cutover or a rollback could not drop everything at once (a long
 *     reader held a table's lock): capture and, unless the tables stay frozen, the freeze.
 *   - For `ferry cleanup ID` (a migration terminated or abandoned mid-way; `target` given): the
 *     bookkeeping on both sides says whether the cutover completed. If it did, the target's
 *     tables are the result: only Ferry's bookkeeping goes, and the freeze stays (`ferry
 *     unfreeze` lifts it). If not, everything goes: capture, guard and freeze on the source,
 *     then every object Ferry created on the target.
 * It retries with growing pauses until nothing is left; each attempt queues for a table's lock
 * only briefly, so the application hardly notices.
 */
import { continueAsNew, ParentClosePolicy, sleep, startChild } from '@temporalio/workflow';
import { helperActivities } from './activity-options';
import { revertCaptureId, rewriteCaptureId } from '../src/core/change-plan';
import { QualifiedName } from '../src/core/identifiers';
import { workflowIds } from '../src/core/names';

const { setFreeze, releaseSource, migrationOutcome, dropTargetObjects, releaseBookkeeping, dropRewriteShadow, closeChange } = helperActivities.cleanup;

export interface CleanupInput {
  migrationId: string;
  source: string;
  /** keep: the tables stay frozen (keep-frozen cutover); remove: writes pass, the freeze goes too. */
  freeze: 'keep' | 'remove';
  /** `ferry cleanup`: the target too, as its bookkeeping says (the freeze is then decided by it). */
  target?: string;
  /** `ferry cleanup`: what the bookkeeping said, carried across continue-as-new. */
  completed?: boolean;
  /** Attempts so far, carried across continue-as-new. */
  attempts?: number;
}

export interface CleanupResult {
  attempts: number;
  /** `ferry cleanup`: whether the migration had completed its cutover (the target kept). */
  completed?: boolean;
  /** `ferry cleanup`: what was dropped on the target. */
  dropped?: string[];
}

const FIRST_PAUSE_MS = 5_000;
const LONGEST_PAUSE_MS = 10 * 60_000;
const ATTEMPTS_PER_RUN = 100;

export async function cleanupWorkflow(input: CleanupInput): Promise<CleanupResult> {
  if (input.target === undefined) return releaseUntilDone(input);
  const target = input.target;
  const ref = { migrationId: input.migrationId, source: input.source, target };
  const completed = input.completed ?? (await migrationOutcome(ref)).completed;
  const { attempts } = await releaseUntilDone({ ...input, completed, freeze: completed ? 'keep' : 'remove' });
  if (completed) {
    await releaseBookkeeping({ migrationId: input.migrationId, target });
    return { attempts, completed, dropped: [] };
  }
  const { dropped } = await dropTargetObjects({ migrationId: input.migrationId, target });
  return { attempts, completed, dropped };
}

/** Releases the source, pausing longer after each attempt that left something behind. */
async function releaseUntilDone(input: CleanupInput): Promise<{ attempts: number }> {
  const ref = { migrationId: input.migrationId, source: input.source };
  let attempts = input.attempts ?? 0;
  for (let run = 0; run < ATTEMPTS_PER_RUN; run += 1) {
    attempts += 1;
    try {
      // The state first: writes pass again (or read "moved") even while triggers remain.
      await setFreeze({ ...ref, state: input.freeze === 'remove' ? 'released' : 'moved' }).catch(() => undefined);
      const { pending } = await releaseSource({ ...ref, freeze: input.freeze });
      if (pending.length === 0) return { attempts };
    } catch {
      // A source that cannot be reached now may be reachable later.
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

export interface ChangeCleanupInput {
  changeId: string;
  database: string;
  /** The plan's rewrite steps; `revertCapture`: its retirement is over, so the new table's capture goes too. */
  rewrites: { step: number; table: QualifiedName; revertCapture: boolean }[];
}

export interface ChangeCleanupResult {
  /** Shadows dropped. */
  dropped: string[];
  /** What a busy lock kept from being removed (its functions no longer record anything). */
  pending: string[];
}

/**
 * changeCleanupWorkflow (`ferry cleanup ID` for a change plan that ended, terminated or not):
 * per rewrite step, capture off the original and, once its retirement is over, off the new
 * table; a shadow left before the swap dropped; then the plan's bookkeeping. The old table a
 * swap renamed aside is not dropped: it may be all that is left of the data before the change.
 */
export async function changeCleanupWorkflow(input: ChangeCleanupInput): Promise<ChangeCleanupResult> {
  const dropped: string[] = [];
  const pending: string[] = [];
  for (const r of input.rewrites) {
    const captures = [rewriteCaptureId(input.changeId, r.step), ...(r.revertCapture ? [revertCaptureId(input.changeId, r.step)] : [])];
    for (const migrationId of captures) pending.push(...(await releaseBriefly(migrationId, input.database)));
    const shadow = await dropRewriteShadow({ changeId: input.changeId, database: input.database, step: r.step, table: r.table });
    if (shadow.dropped) dropped.push(shadow.dropped);
  }
  await closeChange({ changeId: input.changeId, runId: '', database: input.database });
  return { dropped, pending };
}

/** Capture released, tried a few times while a table's lock is busy; what is still left. */
async function releaseBriefly(migrationId: string, source: string): Promise<string[]> {
  let left: string[] = [];
  for (let attempt = 1; attempt <= 5; attempt += 1) {
    left = (await releaseSource({ migrationId, source, freeze: 'remove' })).pending;
    if (left.length === 0) return [];
    await sleep(FIRST_PAUSE_MS * attempt);
  }
  return left;
}
