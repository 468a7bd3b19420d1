/**
 * What a change plan's run shares with the code that runs its steps: ChangeContext for the
 * helpers that drive a backfill or a rewrite (workflows/change/backfill.ts, rewrite.ts),
 * StepRun for the step operations (workflows/change/ops/). Kept apart from workflows/change/change.ts so
 * that those modules do not import the workflow that imports them.
 */
import type { ChangePreflightResult } from '../../activities/change-preflight';
import { ChangePlan, ChangeStep } from '../../src/core/change-plan';
import { Timings } from '../../src/core/timings';
import type { ChangeActivities } from '../activity-options';
import { ChangeTracker } from './tracker';

export type StepDecision = ChangePreflightResult['steps'][number];

/** Where a backfill is: its pass, and the rows its earlier passes updated (what a run continued as new takes up). */
export interface BackfillPlace {
  pass: number;
  updatedBefore: number;
}

/** What the steps share with the helpers that run them (backfill, rewrite). */
export interface ChangeContext {
  id: string;
  runId: string;
  plan: ChangePlan;
  tracker: ChangeTracker;
  /** Grows with every dispatch of a backfill slice: the fence of docs/architecture.md §5. */
  nextFence(): number;
  /** approveCutover has been signalled (a rewrite step with approval: manual waits for it). */
  approved(): boolean;
  /** Between two slices: continues as new (never returns) when the run's history has grown long. */
  checkpoint(step: ChangeStep, place: BackfillPlace): Promise<void>;
  /** The activities, as the run's timings configure them. */
  acts: ChangeActivities;
  timings: Timings;
}

/** What a step operation is given: the plan's run, and how a lock-bound statement is retried. */
export interface StepRun {
  /** The change, its first run's id (the bookkeeping outlives continue-as-new) and its database. */
  ref: { changeId: string; runId: string; database: string };
  tracker: ChangeTracker;
  acts: ChangeActivities;
  /** A lock-bound statement of the step, retried while its lock is busy (workflows/change/lock-retry.ts). */
  whileLockBusy<T>(step: ChangeStep, maxWaitMs: number, attempt: () => Promise<T>): Promise<T>;
  /** For the steps that run helpers (backfill, rewrite). */
  context(): ChangeContext;
}

/** A completed step's undo, as a plan rollback runs it: an action, or a warning that nothing is undone. */
export type UndoAction = { run: () => Promise<unknown> } | { warning: string };

/** A step kind as an operation (workflows/change/ops/): how it runs, is undone and cleaned up after a failure. */
export interface StepOperation<S extends ChangeStep = ChangeStep> {
  /** Before: a step whose completion can be lost after it changed something (an index build, a backfill). */
  undoRegistered: 'before' | 'after';
  run(run: StepRun, step: S, decision: StepDecision, place?: BackfillPlace): Promise<void>;
  /** Undefined: nothing to undo and nothing to say (a validation). */
  undo(run: StepRun, step: S, decision: StepDecision): UndoAction | undefined;
  cleanUpAfterFailure?(run: StepRun, step: S, decision: StepDecision): Promise<void>;
}
