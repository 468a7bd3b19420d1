/**
 * changeWorkflow: one change plan, workflow id = change id (docs/architecture.md §10). Preflight
 * → the steps in order, each under its own timeout → on a failure the step's onFailure: roll
 * back (the completed steps' undo, newest first), pause (wait for `ferry resume`, then retry the
 * step) or fail; the result callback last, always. Same task queue, signals (pause, resume,
 * throttle, cancel) and `state` query as a migration. Its argument is the plan itself.
 */
import { allHandlersFinished, ApplicationFailure, CancellationScope, condition, ContinueAsNew, continueAsNew, isCancellation, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { ChangePreflightResult, StepDecision } from '../../activities/change-preflight';
import { ChangePlan, ChangeStep, parseChangePlan } from '../../src/core/change-plan';
import { changeResultDocument, ChangeResultDocument } from '../../src/core/change-status';
import { FAILURE } from '../../src/core/failure-types';
import { innermostApplicationFailure, rootMessage } from '../../src/core/failures';
import { FerrySourceKey, FerryTargetKey } from '../../src/core/names';
import { SpecError } from '../../src/core/spec';
import { Audit, checkedAudit, ErrorInfo } from '../../src/core/status';
import { ChangeTracker, ChangeTrackerSnapshot } from './tracker';
import { ChangeActivities, changeActivities, changeActivitiesFor, checks, eventStreamActivities, notifyActivities } from '../activity-options';
import { retryWhileLockBusy } from './lock-retry';
import { PRODUCTION_TIMINGS, Timings, TimingsInput, timingProblems, timingsOf } from '../../src/core/timings';
import type { BackfillPlace } from './backfill';
import { ChangeContext, StepRun } from './context';
import { operationOf } from './ops/operation';
import { changeStateQuery } from '../definitions';
import { Callbacks } from '../callbacks';
import type { EventStreamWhere } from '../../src/core/event-subjects';
import { flags } from '../patches';
import { ChangeDesk } from './desk';

export interface ChangeOptions {
  /**
   * What `ferry start`'s preflight decided. Only executions begun before patch
   * `change-own-preflight` used it; since, the workflow runs preflight itself whatever is given.
   */
  preflight?: ChangePreflightResult;
  /** History events after which a run continues as new, between two backfill slices (default 10,000). */
  historyLimit?: number;
  /** From a run that continued as new: where it stopped. */
  resume?: ChangeResume;
  /** Shorter waits than production's (src/core/timings.ts): heartbeat timeout, backfill slice, callback retries. Tests give them. */
  timings?: TimingsInput;
  /** Who started the plan and why (`ferry start --actor --reason`): a `start` control on record. */
  startedBy?: Audit;
}

/** What a run hands to the next when it continues as new (in the middle of a backfill step). */
export interface ChangeResume {
  decisions: StepDecision[];
  tracker: ChangeTrackerSnapshot;
  startedAt: string;
  fence: number;
  approved: boolean;
  /** The step that was running, and where its backfill was. */
  step: number;
  backfill: BackfillPlace;
}

const HISTORY_LIMIT = 10_000;

type Outcome = 'SUCCEEDED' | 'FAILED' | 'CANCELLED';

export async function changeWorkflow(planInput: unknown, options: ChangeOptions = {}): Promise<ChangeResultDocument> {
  return new ChangeRun().run(planInput, options);
}

/** Undo of a completed step, run newest first when the plan rolls back. */
interface Undo {
  step: number;
  run: () => Promise<unknown>;
}

class ChangeRun {
  private readonly info = workflowInfo();
  private tracker!: ChangeTracker;
  private readonly main = new CancellationScope();
  /** The control desk (set once the plan is parsed): pause, throttle, approval and the cancel's reason. */
  private desk!: ChangeDesk;
  private readonly undo: Undo[] = [];
  private fence = 0;
  private callbacks!: Callbacks;
  private timings: Timings = PRODUCTION_TIMINGS;
  private acts: ChangeActivities = changeActivities;
  private planInput: unknown;
  private options: ChangeOptions = {};
  private decisions: StepDecision[] = [];

  async run(planInput: unknown, options: ChangeOptions): Promise<ChangeResultDocument> {
    const plan = this.parse(planInput);
    this.planInput = planInput;
    this.options = options;
    const problems = timingProblems(options.timings);
    if (problems.length > 0) throw ApplicationFailure.nonRetryable(`invalid options:\n${problems.join('\n')}`, FAILURE.InvalidSpec);
    this.timings = timingsOf(options.timings);
    this.acts = changeActivitiesFor(this.timings);
    const { info } = this;
    const { resume } = options;
    const tracker = (this.tracker = new ChangeTracker(info.workflowId, info.runId, plan.database, resume?.startedAt ?? new Date(info.startTime).toISOString(), plan.steps));
    setHandler(changeStateQuery, () => tracker.document());
    if (resume) {
      tracker.restore(resume.tracker);
      this.fence = resume.fence;
    } else {
      tracker.throttle = { rowsPerSecond: plan.throttle.rowsPerSecond };
      tracker.setState('QUEUED', undefined, tracker.startedAt);
      tracker.setState('RUNNING', 'picked up by a worker');
    }
    upsertSearchAttributes([
      { key: FerrySourceKey, value: plan.database },
      { key: FerryTargetKey, value: plan.database },
    ]);
    this.desk = new ChangeDesk(tracker, () => this.main.cancel());
    if (resume) this.desk.approved = resume.approved;
    this.desk.listen();
    const stream = { kind: 'change' as const, publish: eventStreamActivities(this.timings), onEnabled: (where: EventStreamWhere) => tracker.streamingTo(where), timings: options.timings };
    this.callbacks = new Callbacks(this.info.workflowId, plan.callback, notifyActivities(this.timings), stream);
    this.tracker.onEvent = this.callbacks.eventSender();
    if (!resume && options.startedBy && flags.auditedStart) tracker.control('start', 'none', 'queued', checkedAudit(options.startedBy));
    const { outcome, failure } = await this.execute(plan, options);
    return this.end(plan, outcome, failure);
  }

  /** The plan, validated here too: any Temporal client can start this workflow. */
  private parse(planInput: unknown): ChangePlan {
    try {
      return parseChangePlan(planInput);
    } catch (err) {
      const message = err instanceof SpecError ? err.message : String(err);
      throw ApplicationFailure.nonRetryable(`invalid change plan:\n${message}`, FAILURE.InvalidSpec);
    }
  }

  private context(plan: ChangePlan): ChangeContext {
    return {
      id: this.info.workflowId,
      // The first run's id: the bookkeeping (backfill checkpoints) outlives continue-as-new.
      runId: this.info.firstExecutionRunId,
      plan,
      tracker: this.tracker,
      nextFence: () => ++this.fence,
      approved: () => this.desk.approved,
      checkpoint: (step, place) => this.checkpoint(step, place),
      acts: this.acts,
      timings: this.timings,
    };
  }

  /**
   * Continues as new when the history has grown past the limit (or Temporal suggests it): the
   * tracker, the fence, the decisions and the backfill's place go to the next run, which takes
   * the step up where this one stopped. Callbacks in flight are delivered first.
   */
  private async checkpoint(step: ChangeStep, place: BackfillPlace): Promise<void> {
    const info = workflowInfo();
    if (!info.continueAsNewSuggested && info.historyLength < (this.options.historyLimit ?? HISTORY_LIMIT)) return;
    // (Executions begun before this went on in one run: their replays must do the same.)
    if (!flags.changeContinueAsNew) return;
    await this.callbacks.settled();
    await condition(allHandlersFinished);
    const resume: ChangeResume = {
      decisions: this.decisions,
      tracker: this.tracker.snapshot(),
      startedAt: this.tracker.startedAt,
      fence: this.fence,
      approved: this.desk.approved,
      step: step.index,
      backfill: place,
    };
    await continueAsNew<typeof changeWorkflow>(this.planInput, { historyLimit: this.options.historyLimit, resume, ...(this.options.timings ? { timings: this.options.timings } : {}) });
  }

  private async execute(plan: ChangePlan, options: ChangeOptions): Promise<{ outcome: Outcome; failure?: unknown }> {
    const { tracker } = this;
    const ref = { changeId: this.info.workflowId, runId: this.info.firstExecutionRunId, database: plan.database };
    if (options.resume) return this.steps(plan, ref, options.resume.decisions, options.resume);
    let decisions: StepDecision[];
    try {
      // Any Temporal client can start this workflow with a made-up preflight result: the workflow
      // judges the plan itself. (Executions begun before took the one given: replays do too.)
      const given = flags.changeOwnPreflight ? undefined : options.preflight;
      const checked = given ?? (await this.main.run(() => checks.changePreflight({ changeId: ref.changeId, plan })));
      decisions = checked.steps;
    } catch (failure) {
      const outcome: Outcome = isCancellation(failure) ? 'CANCELLED' : 'FAILED';
      tracker.error = this.errorInfo(failure, outcome);
      if (outcome === 'CANCELLED') tracker.setState('CANCELLING', this.desk.cancelReason);
      tracker.setPhase('FAILED', 'preflight refused the plan');
      this.skipRest(0);
      return { outcome, failure };
    }
    decisions.forEach((d) => d.note && (tracker.steps[d.index].note = d.note));
    tracker.setPhase('APPLYING');
    tracker.event('ChangeStarted', undefined, { database: plan.database, steps: plan.steps.length });
    await CancellationScope.nonCancellable(() => this.acts.quick.openChange(ref));
    return this.steps(plan, ref, decisions);
  }

  /** The steps in order, from the first or from where the previous run stopped. */
  private async steps(
    plan: ChangePlan,
    ref: { changeId: string; runId: string; database: string },
    decisions: StepDecision[],
    resume?: ChangeResume,
  ): Promise<{ outcome: Outcome; failure?: unknown }> {
    const { tracker } = this;
    this.decisions = decisions;
    // The undo of the steps done in earlier runs, as they pushed it.
    if (resume) for (const step of plan.steps.slice(0, resume.step)) this.pushUndo(plan, step, decisions[step.index]);
    for (const step of plan.steps) {
      if (resume && step.index < resume.step) continue;
      const failure = await this.runStep(plan, step, decisions[step.index], resume?.step === step.index ? resume.backfill : undefined);
      if (failure === undefined) continue;
      const cancelled = this.main.consideredCancelled;
      const outcome: Outcome = cancelled ? 'CANCELLED' : 'FAILED';
      tracker.error = this.errorInfo(failure.error, outcome, step);
      if (cancelled) tracker.setState('CANCELLING', this.desk.cancelReason);
      if (failure.rollback) await this.rollBack();
      this.skipRest(step.index + 1);
      tracker.setPhase('FAILED', outcome);
      await CancellationScope.nonCancellable(() => this.acts.quick.closeChange(ref));
      return { outcome, failure: failure.error };
    }
    await CancellationScope.nonCancellable(() => this.acts.quick.closeChange(ref));
    tracker.setPhase('COMPLETED', 'every step succeeded');
    return { outcome: 'SUCCEEDED' };
  }

  /**
   * Runs one step to success, or returns how it failed: with onFailure pause, a failure waits
   * for `ferry resume` and the step runs again (a cancel meanwhile ends the wait).
   */
  private async runStep(plan: ChangePlan, step: ChangeStep, decision: StepDecision, resumed?: BackfillPlace): Promise<{ error: unknown; rollback: boolean } | undefined> {
    const { tracker } = this;
    for (;;) {
      if (this.main.consideredCancelled) return { error: new Error(this.desk.cancelReason ?? 'cancelled'), rollback: step.onFailure === 'rollback' };
      // A step taken up from the previous run is RUNNING already, its time counted from its start.
      const started = resumed ? Date.parse(tracker.steps[step.index].startedAt ?? new Date().toISOString()) : Date.now();
      if (!resumed) {
        tracker.setStep(step.index, 'RUNNING');
        tracker.event('StepStarted', step.index, { kind: step.kind });
      }
      const place = resumed;
      resumed = undefined;
      try {
        await this.withTimeout(step, Math.max(1, step.timeoutMs - (Date.now() - started)), () => this.apply(plan, step, decision, place));
        tracker.setStep(step.index, 'SUCCEEDED');
        tracker.event('StepCompleted', step.index, { ms: Date.now() - started });
        return undefined;
      } catch (error) {
        if (error instanceof ContinueAsNew) throw error;
        const info = this.errorInfo(error, 'FAILED', step);
        tracker.steps[step.index].error = info;
        tracker.setStep(step.index, 'FAILED', info.message);
        tracker.event('StepFailed', step.index, { error: info.message, type: info.type });
        await CancellationScope.nonCancellable(() => this.cleanUpFailed(plan, step, decision));
        const cancelled = this.main.consideredCancelled;
        if (step.onFailure !== 'pause' || cancelled) return { error, rollback: step.onFailure === 'rollback' || (cancelled && plan.onFailure === 'rollback') };
        tracker.paused = true;
        tracker.setPhase('AWAITING_RESUME', `step ${step.index + 1} failed; ferry resume retries it`);
        await condition(() => !tracker.paused || this.main.consideredCancelled);
        if (this.main.consideredCancelled) return { error, rollback: plan.onFailure === 'rollback' };
        tracker.setPhase('APPLYING', 'resumed');
      }
    }
  }

  /** The step inside its own scope, under the plan's: cancelled by its timeout (StepTimedOut) or with the plan. */
  private async withTimeout(step: ChangeStep, timeoutMs: number, fn: () => Promise<void>): Promise<void> {
    try {
      await this.main.run(() => CancellationScope.withTimeout(timeoutMs, fn));
    } catch (err) {
      if (isCancellation(err) && !this.main.consideredCancelled) {
        throw ApplicationFailure.create({ message: `did not finish within its ${step.timeoutMs / 1000}s timeout`, type: FAILURE.StepTimedOut, nonRetryable: true });
      }
      throw err;
    }
  }

  /** The step by its kind's operation (workflows/change/ops/), its undo registered before or after it as the operation says. */
  private async apply(plan: ChangePlan, step: ChangeStep, decision: StepDecision, place?: BackfillPlace): Promise<void> {
    const op = operationOf(step);
    if (op.undoRegistered === 'before') this.pushUndo(plan, step, decision);
    await op.run(this.stepRun(plan), step, decision, place);
    if (op.undoRegistered === 'after') this.pushUndo(plan, step, decision);
  }

  /** A step's undo, for a plan rollback: its `down:`, the index it built, or a warning that nothing is undone. */
  private pushUndo(plan: ChangePlan, step: ChangeStep, decision: StepDecision): void {
    const action = operationOf(step).undo(this.stepRun(plan), step, decision);
    if (!action) return;
    if ('warning' in action) {
      const { tracker } = this;
      this.undo.push({ step: step.index, run: async () => tracker.warnings.push(`step ${step.index + 1}${action.warning}`) });
      return;
    }
    this.undo.push({ step: step.index, run: action.run });
  }

  /** What the step operations are given. */
  private stepRun(plan: ChangePlan): StepRun {
    return {
      ref: { changeId: this.info.workflowId, runId: this.info.firstExecutionRunId, database: plan.database },
      tracker: this.tracker,
      acts: this.acts,
      whileLockBusy: (step, maxWaitMs, attempt) => this.whileLockBusy(step, maxWaitMs, attempt),
      context: () => this.context(plan),
    };
  }

  /** A lock-bound statement of a step, retried while its lock is busy (workflows/change/lock-retry.ts). */
  private whileLockBusy<T>(step: ChangeStep, maxWaitMs: number, attempt: () => Promise<T>): Promise<T> {
    return retryWhileLockBusy(
      {
        // The result's error names the step already ("step 2 (sql): …").
        what: 'the lock',
        maxWaitMs,
        onAttempt: (n) => (this.tracker.steps[step.index].attempts = n),
        onWaiting: (n, waiting) => this.tracker.setWaiting(waiting ? `step ${step.index + 1}: lock busy, attempt ${n}` : undefined),
      },
      attempt,
    );
  }

  /** What a failed step may have left (an INVALID index, the safe SET NOT NULL's helper CHECK): its operation's clean-up. */
  private async cleanUpFailed(plan: ChangePlan, step: ChangeStep, decision: StepDecision): Promise<void> {
    try {
      await operationOf(step).cleanUpAfterFailure?.(this.stepRun(plan), step, decision);
    } catch (err) {
      this.tracker.warnings.push(`step ${step.index + 1}: cleaning up after its failure failed: ${rootMessage(err)}`);
    }
  }

  /** The completed steps' undo, newest first, whatever happens to one of them. */
  private async rollBack(): Promise<void> {
    const { tracker } = this;
    tracker.setPhase('ROLLING_BACK', tracker.error?.message);
    tracker.event('RollbackStarted', undefined, { steps: this.undo.length });
    const failed: number[] = [];
    await CancellationScope.nonCancellable(async () => {
      for (const undo of [...this.undo].reverse()) {
        try {
          const warningsBefore = tracker.warnings.length;
          await undo.run();
          if (tracker.warnings.length === warningsBefore && tracker.stepState(undo.step) === 'SUCCEEDED') {
            tracker.setStep(undo.step, 'ROLLED_BACK');
            tracker.event('StepRolledBack', undo.step);
          }
        } catch (err) {
          failed.push(undo.step);
          tracker.warnings.push(`step ${undo.step + 1} could not be undone: ${rootMessage(err)}`);
        }
      }
    });
    this.undo.length = 0;
    tracker.event('RolledBack', undefined, failed.length ? { failedSteps: failed } : undefined);
  }

  private skipRest(from: number): void {
    for (let i = from; i < this.tracker.steps.length; i += 1) if (this.tracker.stepState(i) === 'PENDING') this.tracker.setStep(i, 'SKIPPED');
  }

  private errorInfo(err: unknown, outcome: Outcome, step?: ChangeStep): ErrorInfo {
    if (outcome === 'CANCELLED') return { message: this.desk.cancelReason ?? 'change cancelled', type: FAILURE.Cancelled };
    const failure = innermostApplicationFailure(err);
    const root = rootMessage(err);
    const prefix = step ? `step ${step.index + 1} (${step.kind}): ` : '';
    const info: ErrorInfo = { message: `${prefix}${failure?.message ?? root}` };
    if (failure?.type) info.type = failure.type;
    if (root !== (failure?.message ?? root)) info.cause = root;
    return info;
  }

  private async end(plan: ChangePlan, outcome: Outcome, failure: unknown): Promise<ChangeResultDocument> {
    const { tracker } = this;
    tracker.setWaiting(undefined);
    tracker.endedAt = new Date().toISOString();
    tracker.setState(outcome, outcome === 'SUCCEEDED' ? undefined : tracker.error?.message);
    tracker.event('ChangeFinished', undefined, { state: outcome });
    const result = changeResultDocument(tracker.document(), plan.metadata);
    await this.callbacks.finish(result);
    if (outcome === 'SUCCEEDED') return result;
    throw ApplicationFailure.create({
      message: tracker.error?.message ?? outcome,
      type: outcome === 'CANCELLED' ? FAILURE.ChangeCancelled : FAILURE.ChangeFailed,
      nonRetryable: true,
      details: [result],
      cause: failure instanceof Error ? failure : undefined,
    });
  }
}

