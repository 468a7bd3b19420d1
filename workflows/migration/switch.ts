/**
 * The cutover's switch (cutover.switch): the application's connections moved to the target
 * inside the cutover, so that what the application lives through is a pause, not errors.
 *
 *   pause     before the freeze: PgBouncer's PAUSE (it waits for the transactions in flight and
 *             holds new queries), or the webhook's `paused`; its undo is pushed first;
 *   repoint   once the target is ready, before the point of no return: PgBouncer's entry points
 *             at the target (RELOAD), or the webhook's `switched`; a failure still rolls back;
 *   resume    past the point of no return: RESUME, and the held queries run on the target.
 *
 * A rollback after the pause resumes on the source (the entry put back as it was) or sends the
 * webhook `reverted`. clientPauseMs runs from the pause to the resume.
 */
import { ActivityFailure, ApplicationFailure, CancellationScope, TimeoutFailure } from '@temporalio/workflow';
import type { Spec } from '../../src/core/spec';
import { FAILURE } from '../../src/core/failure-types';
import type { TimingsInput } from '../../src/core/timings';
import type { PgBouncerSwitch, WebhookSwitch } from '../../src/core/spec';
import { hookActivities, poolActivities } from '../activity-options';
import type { SwitchStage } from '../../activities/switch-webhook';
import { timingsOf } from '../../src/core/timings';
import { MigrationContext } from './context';

export interface CutoverSwitch {
  pause(): Promise<void>;
  repoint(): Promise<void>;
  /** The queries held since the pause run on the target; the application's pause in ms. */
  resume(): Promise<number>;
}

export function cutoverSwitch(ctx: MigrationContext): CutoverSwitch | undefined {
  const chosen = ctx.spec.cutover?.switch;
  if (!chosen) return undefined;
  return 'pgbouncer' in chosen ? pgbouncerSwitch(ctx, chosen.pgbouncer) : webhookSwitch(ctx, chosen.webhook);
}

/**
 * Preflight's part: with a PgBouncer switch, a switch worker must serve its queue and find the
 * pooler, the database, its entry and the target as the cutover will need them (checkPool),
 * so that a switch that cannot work is refused before anything starts.
 */
export async function checkSwitch(spec: Spec, timings: TimingsInput | undefined): Promise<void> {
  const chosen = spec.cutover?.switch;
  if (!chosen || !('pgbouncer' in chosen)) return;
  const pool = chosen.pgbouncer;
  const { check } = poolActivities(timingsOf(timings), pool.taskQueue, spec.cutover!.maxWaitMs);
  try {
    await check.checkPool({ migrationId: '', admin: pool.admin, database: pool.database, configFile: pool.configFile, target: spec.target });
  } catch (err) {
    const cause = err instanceof ActivityFailure ? err.cause : undefined;
    if (cause instanceof TimeoutFailure && cause.timeoutType === 'SCHEDULE_TO_START') {
      throw ApplicationFailure.nonRetryable(
        `cutover.switch.pgbouncer.taskQueue: no switch worker took the check on task queue ${pool.taskQueue} within 30 s: start \`ferry worker --task-queue ${pool.taskQueue}\` beside PgBouncer`,
        FAILURE.SwitchRefused,
      );
    }
    throw err;
  }
}

function pgbouncerSwitch(ctx: MigrationContext, pool: PgBouncerSwitch): CutoverSwitch {
  const { id, spec, tracker, saga } = ctx;
  const acts = poolActivities(timingsOf(ctx.options.timings), pool.taskQueue, spec.cutover!.maxWaitMs);
  const ref = { migrationId: id, admin: pool.admin, database: pool.database, configFile: pool.configFile };
  const detail = { switch: 'pgbouncer', database: pool.database };
  let issuedAt: string | undefined;
  return {
    async pause() {
      // First: a PAUSE whose completion is lost still holds the application's queries.
      saga.push('resumePool', async () => {
        const { at } = await acts.resume.resumePool({ ...ref, revert: true });
        tracker.event('SwitchResumed', undefined, { ...detail, on: 'source', ...(issuedAt ? { clientPauseMs: Date.parse(at) - Date.parse(issuedAt) } : {}) });
      });
      const paused = await acts.pool.pausePool({ ...ref, timeoutMs: spec.cutover!.maxWaitMs });
      issuedAt = paused.issuedAt;
      tracker.event('SwitchPaused', undefined, { ...detail, waitedMs: Date.parse(paused.pausedAt) - Date.parse(paused.issuedAt) });
    },
    async repoint() {
      await acts.pool.repointPool({ ...ref, target: spec.target });
      tracker.event('SwitchRepointed', undefined, { ...detail, target: spec.target });
    },
    async resume() {
      const { at } = await CancellationScope.nonCancellable(() => acts.resume.resumePool({ ...ref, revert: false }));
      const clientPauseMs = Math.max(0, Date.parse(at) - Date.parse(issuedAt!));
      tracker.event('SwitchResumed', undefined, { ...detail, on: 'target', clientPauseMs });
      return clientPauseMs;
    },
  };
}

function webhookSwitch(ctx: MigrationContext, hook: WebhookSwitch): CutoverSwitch {
  const { id, spec, tracker, saga } = ctx;
  const hooks = hookActivities(hook.timeoutMs);
  const detail = { switch: 'webhook' };
  const send = (stage: SwitchStage) =>
    hooks.switchHook({ migrationId: id, url: hook.url, secret: hook.secret, stage, timeoutMs: hook.timeoutMs, detail: { source: spec.source, target: spec.target } });
  let issuedAt = 0;
  return {
    async pause() {
      saga.push('revertSwitch', async () => {
        await send('reverted');
        tracker.event('SwitchResumed', undefined, { ...detail, on: 'source', clientPauseMs: Date.now() - issuedAt });
      });
      issuedAt = Date.now();
      await send('paused');
      tracker.event('SwitchPaused', undefined, { ...detail, waitedMs: Date.now() - issuedAt });
    },
    async repoint() {
      await send('switched');
      tracker.event('SwitchRepointed', undefined, { ...detail, target: spec.target });
    },
    async resume() {
      // The switcher's 2xx to `switched` said its traffic goes to the target now.
      const clientPauseMs = Math.max(0, Date.now() - issuedAt);
      tracker.event('SwitchResumed', undefined, { ...detail, on: 'target', clientPauseMs });
      return clientPauseMs;
    },
  };
}
