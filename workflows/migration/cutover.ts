/**
 * The cutover of an online migration, once every table is copied, validated, indexed and caught
 * up, its foreign keys are in place and the cutover is approved:
 *
 *   freeze      flip the freeze state installed with capture: every new write to a migrated
 *               table is refused from this moment (no lock, so no race with writers);
 *   writers     wait until the write transactions begun before the flip have ended — their
 *               changes must be in the log before the drain — naming them while they block;
 *               after cutover.maxWait, cutover.onBlocked decides: roll back, end them, or wait.
 *               The tables are not stopped: the drain takes their syncs over, and they are
 *               asked to finish past the point of no return (before, at the flip; before the
 *               sealed drain, after this wait, and the drain waited for them to end);
 *   drain       the last changes are applied and the changed rows compared, in groups of
 *               tables, each table's sync taken over from its workflow (a fence ahead of its
 *               own): work that grows with the rows changed, not the table;
 *   sequences   the source's positions, and foreign keys that could not be added earlier;
 *   no return   the target is authoritative; nothing after this can fail the migration:
 *               capture and (afterwards: unfreeze) the freeze are removed where locks allow,
 *               the rest in the background, reported as warnings.
 *
 * The write outage runs from the flip to the point of no return. With cutover.switch
 * (workflows/migration/switch.ts) the application's queries are held from before the flip until
 * just past the point of no return, and then run on the target: clientPauseMs.
 */
import { ApplicationFailure, CancellationScope, ChildWorkflowHandle } from '@temporalio/workflow';
import { innermostApplicationFailure } from '../../src/core/failures';
import { copyTableOf, TablePlan } from '../../src/core/plan';
import { Blocker, CutoverReport } from '../../src/core/status';
import { runBounded } from './bounded';
import { cleanUpInBackground } from '../cleanup';
import type { CaptureStream } from './capture-stream';
import { MigrationContext, objectSequences } from './context';
import { finishSyncSignal } from '../definitions';
import { SLICE_MS, SYNC_BATCH_KEYS, tableMigrationWorkflow } from './table';
import { FAILURE } from '../../src/core/failure-types';
import { flags } from '../patches';
import { cutoverActivities } from '../activity-options';
import { timingsOf } from '../../src/core/timings';
import { cutoverSwitch } from './switch';

/**
 * How long one wait for writers runs before it reports who still blocks: soon at first, then —
 * while the same sessions block — longer, so a long wait (onBlocked: wait) adds little history.
 */
const WRITERS_FIRST_SLICE_MS = 5_000;
const WRITERS_LONGEST_SLICE_MS = 60_000;

export interface CutoverInput {
  ctx: MigrationContext;
  tables: ChildWorkflowHandle<typeof tableMigrationWorkflow>[];
  /** Foreign keys added NOT VALID only now (the target cannot apply as a replica before). */
  foreignKeysAfterDrain: boolean;
  /** Foreign keys whose validation waits until after the point of no return. */
  unvalidatedForeignKeys: { table: TablePlan['target']; name: string }[];
  /** Logical capture's consumer: the drain waits for it; it is stopped after the drain and awaited past the point of no return. */
  capture?: CaptureStream;
  /**
   * The drain takes each table's sync with a fence ahead of the table's own instead of waiting
   * for its workflow to end (PATCHES.sealedDrain; the tables were started with fencedRecheck).
   */
  sealedDrain?: boolean;
  /** Throws the failure of a table workflow that has failed (a sealed drain does not wait for them). */
  failed?: () => void;
}

/**
 * A sealed drain's fences are this far ahead of the clock: a table's own slices take the clock
 * (or one more than their last), so none of theirs can pass a drain's while a migration lasts.
 */
const SEAL_AHEAD_MS = 365 * 24 * 3600_000;
/** Tables per drainTables activity: a few activities drain hundreds of tables. */
const DRAIN_GROUP_TABLES = 25;

export async function cutOver(given: CutoverInput): Promise<CutoverReport> {
  const input = onCutoverQueue(given);
  const { ctx } = input;
  const { id, spec, tracker, saga } = ctx;
  const { cutoverSteps } = ctx.acts;
  tracker.step('cutover');
  tracker.setPhase('CUTTING_OVER', spec.cutover!.approval === 'auto' ? 'approved automatically' : 'approved');
  tracker.event('CutoverStarted');
  // cutover.switch: the application's queries held before the freeze, so none meets it.
  const moved = cutoverSwitch(ctx);
  if (moved) await moved.pause();
  saga.push('openSource', () => cutoverSteps.setFreeze({ migrationId: id, source: spec.source, state: 'open' }));
  const { at: frozenAt } = await cutoverSteps.setFreeze({ migrationId: id, source: spec.source, state: 'frozen' });
  // Sealed: the drain takes the tables' syncs over, so they are asked to finish past the point
  // of no return (PATCHES.tablesAskedAfterOutage), their signals and endings kept out of the
  // outage (executions begun before asked at the flip; before the sealed drain, the outage
  // waited after the writers for every table workflow to end).
  const sealed = input.sealedDrain === true;
  const askLater = sealed && flags.tablesAskedAfterOutage;
  const askedAtFlip = sealed && !askLater ? askToFinish(input) : undefined;
  askedAtFlip?.catch(() => undefined); // awaited past the point of no return
  // A consumer that fails from here on could never confirm what the writers still commit.
  const capture = input.capture;
  const watched = capture && flags.deadConsumerEndsCutover ? <T>(work: () => Promise<T>) => capture.unlessFailed(work) : <T>(work: () => Promise<T>) => work();
  await watched(() => awaitWriters(ctx, frozenAt));
  // The writers are done; their changes reach the logs once the consumer is past this moment.
  if (capture) await watched(() => cutoverSteps.awaitCaptured({ migrationId: id, source: spec.source }));
  if (!sealed) {
    await askToFinish(input);
    await Promise.all(input.tables.map((t) => t.result()));
  }
  const dirtyRowsChecked = sealed ? await drainSealed(ctx) : await drainAndCheck(ctx);
  input.failed?.();
  // The consumer's work is done (the drain had all it captured). Its activity hears of the stop
  // at its next heartbeat, up to the worker's 2 s heartbeat throttle later: that wait stays out
  // of the write outage, awaited past the point of no return (executions begun before the patch
  // awaited it here, and replay so).
  const consumerStopped = input.capture?.stop();
  if (input.capture && !flags.consumerStopOutsideOutage) await consumerStopped;
  const unvalidated = await finishTarget(input);
  // Still undone on a failure: the application's queries are held until the resume.
  if (moved) await moved.repoint();

  // Point of no return: the target is authoritative.
  saga.clear();
  const writeOutageMs = Math.max(0, Date.now() - Date.parse(frozenAt));
  const clientPauseMs = moved ? await moved.resume() : undefined;
  const afterwards = spec.cutover!.afterwards;
  const asked = askLater ? askToFinish(input) : askedAtFlip;
  // Their last reports before the tables are marked complete.
  if (asked) await tablesEnded(ctx, input.tables, asked);
  tracker.completeTables();
  tracker.event('CutoverCompleted', undefined, { writeOutageMs, dirtyRowsChecked, afterwards, ...(moved ? { clientPauseMs } : {}) });
  // Before capture is released: a consumer still streaming would fail on its dropped slot.
  await consumerStopped;
  tracker.step('afterwards');
  await CancellationScope.nonCancellable(() => afterPointOfNoReturn(ctx, unvalidated));
  const switched = spec.cutover!.switch ? { switch: 'pgbouncer' in spec.cutover!.switch ? ('pgbouncer' as const) : ('webhook' as const), clientPauseMs: clientPauseMs! } : {};
  return { frozenAt, writeOutageMs, dirtyRowsChecked, afterwards, ...switched };
}

/** The steps inside the outage on the cutover task queue, on slots no table's sync holds (PATCHES.cutoverQueue). */
function onCutoverQueue(input: CutoverInput): CutoverInput {
  if (!flags.cutoverQueue) return input;
  return { ...input, ctx: { ...input.ctx, acts: { ...input.ctx.acts, ...cutoverActivities(timingsOf(input.ctx.options.timings)) } } };
}

/**
 * The target's last steps inside the outage: foreign keys that could not be added before the
 * drain (NOT VALID: no scan here), then sequences and the completion mark. Returns the foreign
 * keys to validate after the point of no return.
 */
async function finishTarget(input: CutoverInput): Promise<CutoverInput['unvalidatedForeignKeys']> {
  const { ctx } = input;
  const { id, spec, tracker } = ctx;
  const { steps } = ctx.acts;
  const unvalidated = [...input.unvalidatedForeignKeys];
  if (input.foreignKeysAfterDrain) {
    const added = await steps.addForeignKeys({ source: spec.source, target: spec.target, tables: ctx.plan.tables });
    for (const fk of added.skipped) tracker.warnings.push(`foreign key ${fk} not created: the referenced table is not on the target`);
    unvalidated.push(...added.foreignKeys);
  }
  await steps.finishTarget({ migrationId: id, source: spec.source, target: spec.target, tables: ctx.plan.tables, ...objectSequences(ctx) });
  return unvalidated;
}

/** Waits for the write transactions begun before the freeze, as cutover.onBlocked says. */
async function awaitWriters(ctx: MigrationContext, frozenAt: string): Promise<void> {
  const { id, spec, tracker } = ctx;
  const { cutoverSteps } = ctx.acts;
  const { maxWaitMs, onBlocked } = spec.cutover!;
  const deadline = Date.now() + maxWaitMs;
  const tables = ctx.plan.tables.map((t) => t.source);
  let reported = '';
  let waitingFor: Blocker[] = [];
  let sliceMs = WRITERS_FIRST_SLICE_MS;
  for (;;) {
    const terminate = onBlocked === 'terminate' && Date.now() >= deadline;
    // Never past the deadline, where onBlocked acts.
    const untilDeadline = deadline - Date.now();
    const { blockers, terminated } = await cutoverSteps.awaitWriters({
      migrationId: id,
      source: spec.source,
      tables,
      frozenAt,
      sliceMs: untilDeadline > 0 && onBlocked !== 'wait' ? Math.min(sliceMs, untilDeadline) : sliceMs,
      terminate,
    });
    tracker.setBlockers(blockers);
    const seen = blockerSet(blockers);
    if (terminated.length > 0) {
      const ended = [...waitingFor, ...blockers].filter((b, i, all) => terminated.includes(b.pid) && all.findIndex((x) => x.pid === b.pid) === i);
      tracker.event('CutoverBlocked', undefined, { blockers: ended, terminated });
    } else if (seen && seen !== reported) tracker.event('CutoverBlocked', undefined, { blockers });
    sliceMs = seen === reported ? Math.min(WRITERS_LONGEST_SLICE_MS, sliceMs * 2) : WRITERS_FIRST_SLICE_MS;
    reported = seen;
    if (blockers.length > 0) waitingFor = blockers;
    if (blockers.length === 0) return;
    // A prepared transaction has no session to end: terminating cannot get past it.
    const unterminable = blockers.filter((b) => b.pid === 0);
    if (terminate && unterminable.length > 0 && flags.unterminableBlockersRollBack) {
      tracker.event('CutoverBlocked', undefined, { blockers: unterminable, terminated, outcome: 'rollback: a prepared transaction cannot be terminated' });
      throw ApplicationFailure.nonRetryable(
        `the cutover waited ${Math.round(maxWaitMs / 1000)}s for write transactions begun before the freeze and cannot terminate ${describe(unterminable)}: ` +
          'a prepared transaction has no session to end; rolled back (COMMIT PREPARED or ROLLBACK PREPARED it first)',
        FAILURE.CutoverBlocked,
      );
    }
    if (Date.now() >= deadline && onBlocked === 'rollback') {
      throw ApplicationFailure.nonRetryable(
        `the cutover waited ${Math.round(maxWaitMs / 1000)}s for write transactions begun before the freeze: ${describe(blockers)}; ` +
          'rolled back (end them first, or set cutover.onBlocked: terminate or a longer cutover.maxWait)',
        FAILURE.CutoverBlocked,
      );
    }
  }
}

function blockerSet(blockers: Blocker[]): string {
  return blockers
    .map((b) => b.pid)
    .sort((a, b) => a - b)
    .join(',');
}

function describe(blockers: Blocker[]): string {
  return blockers.map((b) => `pid ${b.pid} (${b.applicationName || 'no application name'}, user ${b.user}, open ${b.xactAgeSeconds}s)`).join(', ');
}

/** finishSync to every table. One that has failed meanwhile (its last slice found capture lost) has no workflow to signal: its own failure, from its result, is the one to report. */
function askToFinish(input: CutoverInput): Promise<unknown> {
  const ended = flags.tableFailureOverSignal;
  const unlessEnded = (err: unknown) => {
    if (innermostApplicationFailure(err)?.type !== 'ExternalWorkflowExecutionNotFound') throw err;
  };
  return Promise.all(input.tables.map((table) => (ended ? table.signal(finishSyncSignal).catch(unlessEnded) : table.signal(finishSyncSignal))));
}

/** Past the point of no return: a table workflow that failed after the drain had its table is a warning. */
async function tablesEnded(ctx: MigrationContext, tables: CutoverInput['tables'], asked: Promise<unknown>): Promise<void> {
  await asked.catch((err: unknown) => ctx.tracker.warnings.push(`a table was not asked to finish: ${innermostApplicationFailure(err)?.message ?? String(err)}`));
  await Promise.all(
    tables.map(async (table, index) => {
      try {
        await table.result();
      } catch (err) {
        const message = innermostApplicationFailure(err)?.message ?? String(err);
        ctx.tracker.warnings.push(`the workflow of ${ctx.tracker.tables[index].source} failed after the drain had taken its table over: ${message}`);
      }
    }),
  );
}

/**
 * A sealed drain (the table workflows may still run a slice): groups of tables, one drainTables
 * activity each (activities/drain.ts), whose first slice of each table takes its sync's fence.
 */
async function drainSealed(ctx: MigrationContext): Promise<number> {
  const { id, spec, plan, tracker } = ctx;
  const { drain } = ctx.acts;
  const groups: TablePlan[][] = [];
  for (let i = 0; i < plan.tables.length; i += DRAIN_GROUP_TABLES) groups.push(plan.tables.slice(i, i + DRAIN_GROUP_TABLES));
  // Each group's fences a drain's own: a million apart (each attempt takes a thousand of them).
  const fence = Date.now() + SEAL_AHEAD_MS;
  let checked = 0;
  // Every group at once: the drain is the write outage's own work.
  await Promise.all(
    groups.map(async (group, g) => {
      const { tables } = await drain
        .drainTables({
          migrationId: id,
          source: spec.source,
          target: spec.target,
          tables: group.map(copyTableOf),
          fence: fence + g * 1_000_000,
          sliceMs: SLICE_MS,
          batchKeys: SYNC_BATCH_KEYS,
          check: spec.validation !== 'none',
          ...(spec.parallelism.apply > 1 ? { lanes: spec.parallelism.apply } : {}),
        })
        .catch((err: unknown) => {
          // The drain checks capture too: changes it never logged must not pass the cutover.
          const failure = innermostApplicationFailure(err);
          const lost = failure?.type === FAILURE.CaptureLost ? (failure.details?.[0] as { tableIndex?: number } | undefined)?.tableIndex : undefined;
          if (lost !== undefined) tracker.event('CaptureLost', tracker.tables[lost].source, { message: failure!.message });
          throw err;
        });
      for (const table of tables) {
        checked += table.checked;
        if (table.mismatched > 0 || table.remaining > 0) breach(ctx, table.index, table);
      }
    }),
  );
  return checked;
}

function breach(ctx: MigrationContext, index: number, check: { mismatched: number; remaining: number }): never {
  const { tracker } = ctx;
  tracker.event('ConsistencyBreach', tracker.tables[index].source, { mismatched: check.mismatched, remaining: check.remaining });
  throw ApplicationFailure.nonRetryable(
    `${tracker.tables[index].source}: ${check.mismatched || check.remaining} changed row(s) still differ after the final drain`,
    FAILURE.ConsistencyBreach,
  );
}

/** The source is frozen and its writers are done: the logs can only shrink. */
async function drainAndCheck(ctx: MigrationContext): Promise<number> {
  const { id, spec, plan, tracker } = ctx;
  const { drain } = ctx.acts;
  let checked = 0;
  await runBounded(plan.tables, plan.tables.length, async (table) => {
    const copyTable = copyTableOf(table);
    const ref = { migrationId: id, source: spec.source, target: spec.target, table: copyTable };
    const drainAll = async () => {
      for (;;) {
        const r = await drain
          .syncChanges({
            ...ref,
            fence: Date.now(),
            sliceMs: SLICE_MS,
            batchKeys: SYNC_BATCH_KEYS,
            recordDirty: spec.validation !== 'none',
            returnWhenCaughtUp: true,
            ...(spec.parallelism.apply > 1 ? { lanes: spec.parallelism.apply } : {}),
          })
          .catch((err: unknown) => {
            // The drain checks capture too: changes it never logged must not pass the cutover.
            const failure = innermostApplicationFailure(err);
            if (failure?.type === FAILURE.CaptureLost && flags.captureLostEvent) {
              tracker.event('CaptureLost', tracker.tables[table.index].source, { message: failure.message });
            }
            throw err;
          });
        if (r.caughtUp && r.pending === 0) return;
      }
    };
    await drainAll();
    if (spec.validation === 'none') return;
    let check = await drain.checkDirtyKeys(ref);
    if (check.mismatched > 0) {
      await drainAll();
      check = await drain.checkDirtyKeys(ref);
    }
    checked += check.checked;
    if (check.mismatched > 0 || check.remaining > 0) breach(ctx, table.index, check);
  });
  return checked;
}

/**
 * Past the point of no return nothing may fail the migration: the freeze state first (no lock),
 * then capture and, for afterwards: unfreeze, the freeze triggers where their table's lock is
 * free; foreign keys left unvalidated are validated now. Leftovers become warnings and a
 * background cleanup.
 */
async function afterPointOfNoReturn(ctx: MigrationContext, unvalidatedForeignKeys: CutoverInput['unvalidatedForeignKeys']): Promise<void> {
  const { id, spec, tracker } = ctx;
  const { release } = ctx.acts;
  const source = { migrationId: id, source: spec.source };
  const unfreeze = spec.cutover!.afterwards === 'unfreeze';
  const pending: string[] = [];
  const attempt = async (what: string, step: () => Promise<{ pending?: string[] } | unknown>) => {
    try {
      const result = (await step()) as { pending?: string[] } | undefined;
      pending.push(...(result?.pending ?? []));
    } catch {
      pending.push(what);
    }
  };
  await attempt('the freeze state', () => release.setFreeze({ ...source, state: unfreeze ? 'released' : 'moved' }));
  await attempt('change capture', () => release.releaseSource({ ...source, freeze: unfreeze ? 'remove' : 'keep' }));
  for (const fk of unvalidatedForeignKeys) {
    try {
      await release.validateForeignKey({ target: spec.target, foreignKey: fk });
    } catch {
      tracker.warnings.push(`foreign key ${fk.name} on ${fk.table.schema}.${fk.table.name} is in place but NOT VALID: validate it with ALTER TABLE … VALIDATE CONSTRAINT`);
    }
  }
  if (pending.length > 0) tracker.warnings.push(await cleanUpInBackground({ migrationId: id, source: spec.source, freeze: unfreeze ? 'remove' : 'keep' }, pending));
}
