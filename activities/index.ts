/**
 * Every side effect Ferry performs, built from injected dependencies. Workflows import only the
 * type `Activities` and call these through proxyActivities.
 */
import { createBackfillActivities } from './backfill';
import { createSendCallback } from './callback';
import { createCaptureActivities } from './capture';
import { createCheckDirty } from './check-dirty';
import { createChangeIndexActivities } from './change-index';
import { createChangePreflight } from './change-preflight';
import { createChangeSqlActivities } from './change-sql';
import { classified } from './classified';
import { createCleanupActivities } from './cleanup';
import { createCopyChunk, createCopySmallTables } from './copy-chunk';
import { createDrainTables, createSealGroup } from './drain';
import { ActivityDeps, DEFAULT_ACTIVITY_SLOTS } from './deps';
import { createFinalizeTarget } from './legacy/finalize-target';
import { createForeignKeyActivities } from './foreign-keys';
import { createFreezeActivities } from './freeze';
import { createIndexActivities } from './indexes';
import { createPreflight } from './preflight';
import { createRestoreObjects } from './objects';
import { createPlanTables, createPrepareTarget, createStoredPlan } from './prepare-target';
import { createRollbackTarget } from './rollback-target';
import { createEventActivities } from './events';
import { createSwitchActivities } from './switch';
import { createSwitchHook } from './switch-webhook';
import { createSyncActivities } from './sync-changes';
import { createStreamActivities } from './stream-changes';
import { createRewriteActivities } from './rewrite';
import { createRewriteSwapActivities } from './rewrite-swap';
import { createChecksumBlocks, createRepairRange, createValidateAtPosition, createValidateChunk } from './validate-chunk';
import { Limiter } from '../src/core/limiter';

export type { ActivityDeps };

export function createActivities(deps: ActivityDeps) {
  const sync = createSyncActivities(deps);
  const checkDirtyKeys = createCheckDirty(deps);
  return classified({
    preflight: createPreflight(deps),
    prepareTarget: createPrepareTarget(deps),
    restoreObjects: createRestoreObjects(deps),
    storedPlan: createStoredPlan(deps),
    planTables: createPlanTables(deps),
    copyChunk: createCopyChunk(deps),
    copySmallTables: createCopySmallTables(deps),
    validateChunk: createValidateChunk(deps),
    validateAtPosition: createValidateAtPosition(deps),
    repairRange: createRepairRange(deps),
    checksumBlocks: createChecksumBlocks(deps),
    finalizeTarget: createFinalizeTarget(deps),
    ...createRollbackTarget(deps),
    ...createCaptureActivities(deps),
    ...createFreezeActivities(deps),
    ...createIndexActivities(deps),
    ...createForeignKeyActivities(deps),
    ...createCleanupActivities(deps),
    ...sync,
    ...createStreamActivities(deps),
    checkDirtyKeys,
    // The cutover's drain and check of a group of tables (PATCHES.sealedDrain).
    drainTables: createDrainTables({ sealGroup: createSealGroup(deps), syncChanges: sync.syncChanges, checkDirtyKeys }, new Limiter(deps.activitySlots ?? DEFAULT_ACTIVITY_SLOTS)),
    sendCallback: createSendCallback(deps),
    ...createEventActivities(deps),
    // The cutover's switch: PgBouncer's (served beside it, createSwitchWorkerActivities) or a webhook's.
    ...createSwitchActivities(deps),
    switchHook: createSwitchHook(deps),
    // Change plans (docs/architecture.md §10).
    changePreflight: createChangePreflight(deps),
    ...createChangeSqlActivities(deps),
    ...createBackfillActivities(deps),
    ...createChangeIndexActivities(deps),
    ...createRewriteActivities(deps),
    ...createRewriteSwapActivities(deps),
  });
}

export type Activities = ReturnType<typeof createActivities>;

/** What a switch worker beside PgBouncer serves (`ferry worker --task-queue …`): the switch alone. */
export function createSwitchWorkerActivities(deps: ActivityDeps) {
  return classified(createSwitchActivities(deps));
}
