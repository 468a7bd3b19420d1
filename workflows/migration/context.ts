/** What the parent's chains share: the spec, the plan, the tracker, the saga, the children. */
import { ChildWorkflowCancellationType, ChildWorkflowHandle, startChild, workflowInfo } from '@temporalio/workflow';
import { workflowIds } from '../../src/core/names';
import { MigrationPlan, TablePlan } from '../../src/core/plan';
import type { QualifiedName } from '../../src/core/identifiers';
import { Spec } from '../../src/core/spec';
import type { TimingsInput } from '../../src/core/timings';
import type { Audit } from '../../src/core/status';
import type { MigrationActivities } from '../activity-options';
import { Control, TableProgress } from '../definitions';
import { Saga } from '../saga';
import { tableMigrationWorkflow } from './table';
import { Tracker } from './tracker';
import { flags } from '../patches';

export interface MigrationOptions {
  /** Continue-as-new threshold handed to table workflows (history events). */
  tableHistoryLimit?: number;
  /**
   * The plan `ferry start` got from preflight moments before; without it (any other caller)
   * the workflow runs preflight itself.
   */
  plan?: MigrationPlan;
  /** `ferry retry`: a new run after FAILED, resuming from the plan and checkpoints left behind. */
  resume?: boolean;
  /**
   * Shorter waits than production's (src/core/timings.ts): heartbeat timeout, re-check period,
   * idle cap, callback retries. Tests give them; absent, production's.
   */
  timings?: TimingsInput;
  /** Who started the migration and why (`ferry start --actor --reason`): a `start` control on record. */
  startedBy?: Audit;
}

export interface MigrationContext {
  id: string;
  spec: Spec;
  plan: MigrationPlan;
  tracker: Tracker;
  saga: Saga;
  options: MigrationOptions;
  /** The activities, as the run's timings configure them. */
  acts: MigrationActivities;
  /** The control forwarded to table workflows (the rate cap with its current share). */
  control(): Control;
  children: Map<number, ChildWorkflowHandle<typeof tableMigrationWorkflow>>;
  /** A table's milestone, as the tableProgress signal delivers it (also from a table's result). */
  progress(p: TableProgress): void;
  /** Set by the approveCutover signal. */
  approved(): boolean;
  /** Approves as the approveCutover signal does, with who approved and why (approval: event). */
  approveBy(audit: Audit): void;
  /**
   * Indexes per table and foreign keys before the approval, the armed freeze online; false in
   * executions begun before PATCHES.targetReadyBeforeCutover.
   */
  targetReadyBeforeCutover: boolean;
  /** Tables created without their primary key, built after each table's load (false before PATCHES.primaryKeyAfterLoad). */
  primaryKeyAfterLoad: boolean;
  /** Full mode: a started table is marked FULL_MIGRATING here, not by its signal (false before PATCHES.parentMarksCopying). */
  parentMarksCopying: boolean;
}

/** Pushes the target's undo first (its completion can be lost), then prepares the target. */
export async function prepareTarget(ctx: MigrationContext): Promise<void> {
  const { id, spec, plan, saga } = ctx;
  const { steps } = ctx.acts;
  // (A stored plan's undo was pushed when preflight stored it: workflows/migration/migration.ts.)
  if (spec.onFailure === 'rollback' && !plan.stored) saga.push('dropTargetObjects', () => steps.dropTargetObjects({ migrationId: id, target: spec.target }));
  await steps.prepareTarget({
    migrationId: id,
    source: spec.source,
    target: spec.target,
    // A stored plan's tables are read on the target, not carried (MigrationPlan.stored).
    plan: plan.stored ? { ...plan, tables: [] } : plan,
    truncate: spec.truncate,
    ...(ctx.primaryKeyAfterLoad ? { primaryKeyAfterLoad: true } : {}),
  });
}

/**
 * `objects: all`: the second pass of the source's other objects, once the tables are loaded
 * (activities/objects.ts). Nothing for a plan without objects — every execution begun before
 * the spec could ask for them, so their histories replay unchanged.
 */
export async function restoreObjects(ctx: MigrationContext): Promise<void> {
  const { id, spec, plan, tracker } = ctx;
  if (!plan.objects) return;
  tracker.step('objects');
  const { created, refreshed } = await ctx.acts.steps.restoreObjects({ migrationId: id, source: spec.source, target: spec.target, ...everyTable(ctx), objects: plan.objects });
  tracker.event('ObjectsRestored', undefined, { created, refreshed: refreshed.length });
}

/**
 * What an activity that takes every table gets: the tables, or — a stored plan's, thousands of
 * them (MigrationPlan.stored) — the migration whose stored plan it reads them from.
 */
export function everyTable({ id, plan }: Pick<MigrationContext, 'id' | 'plan'>): { tables: TablePlan[]; storedFor?: string } {
  return plan.stored ? { tables: [], storedFor: id } : { tables: plan.tables };
}

/** finishTarget's standalone sequences (`objects: all`); nothing otherwise. */
export function objectSequences({ plan }: Pick<MigrationContext, 'plan'>): { sequences?: QualifiedName[] } {
  return plan.objects && plan.objects.sequences.length > 0 ? { sequences: plan.objects.sequences } : {};
}

/** batchRows' default before batches were sized by bytes. */
const EARLIER_DEFAULT_BATCH_ROWS = 50_000;

/** The spec's batchRows; without one, none (batches sized by bytes), unless the migration began before that. */
export function batchRowsOf(spec: Spec): number | undefined {
  if (spec.batchRows !== undefined) return spec.batchRows;
  return flags.batchesByBytes ? undefined : EARLIER_DEFAULT_BATCH_ROWS;
}

/** `fencedRecheck`: the table's dirty-key re-checks write under its sync fence (PATCHES.sealedDrain). */
export async function startTable(ctx: MigrationContext, table: TablePlan, waitForCopySlot: boolean, { fencedRecheck = false } = {}) {
  const { id, spec, tracker } = ctx;
  const marked = ctx.parentMarksCopying && spec.mode === 'full';
  const child = await startChild(tableMigrationWorkflow, {
    workflowId: workflowIds.table(id, table.index),
    cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    staticSummary: `${tracker.tables[table.index].source} → ${tracker.tables[table.index].target}`,
    args: [
      {
        migrationId: id,
        parentWorkflowId: workflowInfo().workflowId,
        mode: spec.mode,
        source: spec.source,
        target: spec.target,
        table,
        batchRows: batchRowsOf(spec),
        validation: spec.validation,
        chunkParallelism: spec.parallelism.chunks,
        control: ctx.control(),
        waitForCopySlot,
        historyLimit: ctx.options.tableHistoryLimit,
        ...(ctx.options.timings ? { timings: ctx.options.timings } : {}),
        ...(ctx.targetReadyBeforeCutover ? { indexes: { parallelism: spec.parallelism.indexes } } : {}),
        ...(ctx.primaryKeyAfterLoad ? { primaryKeyAfterLoad: true } : {}),
        ...(spec.mode === 'online' && spec.parallelism.apply > 1 ? { applyLanes: spec.parallelism.apply } : {}),
        ...(marked ? { copyingMarkedByParent: true } : {}),
        ...(fencedRecheck ? { fencedRecheck: true } : {}),
      },
    ],
  });
  // (A milestone of the table's can arrive in the same activation: the phase only moves on.)
  if (marked && tracker.tables[table.index].phase === 'PENDING') tracker.applyProgress({ tableIndex: table.index, phase: 'FULL_MIGRATING' });
  ctx.children.set(table.index, child);
  return child;
}

/** Table phases that mean "its copy is done". */
export const COPIED = new Set(['FULL_DONE', 'INCR_SYNCING', 'VALIDATING', 'AWAITING_APPROVAL', 'CUTTING_OVER', 'COMPLETED']);

/** The migration's phase follows its tables: all copied → FULL_DONE, then VALIDATING or INCR_SYNCING. */
export function derivePhase(tracker: Tracker, spec: Spec): void {
  const phases = tracker.tables.map((t) => t.phase);
  const copied = phases.length > 0 && phases.every((p) => COPIED.has(p));
  if (tracker.phase.state === 'FULL_MIGRATING' && copied) tracker.setPhase('FULL_DONE', 'every table copied');
  if (tracker.phase.state !== 'FULL_DONE' || !copied) return;
  if (spec.mode === 'online') tracker.setPhase('INCR_SYNCING', 'applying the change logs');
  else if (spec.validation !== 'none') tracker.setPhase('VALIDATING', `validation: ${spec.validation}`);
}
