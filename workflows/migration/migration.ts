/**
 * migrationWorkflow: one migration, workflow id = migration id (docs/architecture.md §2).
 * preflight → the mode's chain (full-load.ts or online.ts) → release bookkeeping; on failure,
 * cancellation or deadline the saga's compensations run in reverse; the result callback last,
 * always. Its argument is the spec itself, so any Temporal SDK can start it.
 */
import { ApplicationFailure, CancellationScope, CancelledFailure, isCancellation, setHandler, sleep, upsertMemo, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import { endingMessage } from '../../src/core/details';
import { innermostApplicationFailure, rootMessage } from '../../src/core/failures';
import { FerrySourceKey, FerryTargetKey } from '../../src/core/names';
import { Spec, SpecError } from '../../src/core/spec';
import { checkPlan, MigrationPlan, PLAN_LOAD_PAGE, TablePlan } from '../../src/core/plan';
import { checkedAudit, ErrorInfo, resultDocument, ResultDocument } from '../../src/core/status';
import { timingProblems, timingsOf } from '../../src/core/timings';
import { MigrationActivities, eventStreamActivities, migrationActivities } from '../activity-options';
import { derivePhase, MigrationContext, MigrationOptions } from './context';
import { MigrationDesk } from './control';
import { stateQuery, TableProgress, tableProgressSignal } from '../definitions';
import { runFullLoad } from './full-load';
import { runOnline } from './online';
import { Saga } from '../saga';
import { Callbacks } from '../callbacks';
import type { EventStreamWhere } from '../../src/core/event-subjects';
import { parseWorkflowSpec } from './spec-input';
import { checkSwitch } from './switch';
import { Tracker } from './tracker';
import { FAILURE } from '../../src/core/failure-types';
import { flags } from '../patches';

export type { MigrationOptions };

type Outcome = 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'TIMED_OUT';

export async function migrationWorkflow(specInput: unknown, options: MigrationOptions = {}): Promise<ResultDocument> {
  return new MigrationRun(options).run(specInput);
}

/**
 * One migration's run: the tracker (states, events, status), the control desk, the saga, the
 * deadline and the callbacks in fields; its steps as methods. The order of the commands it
 * issues is what recorded histories replay against: reorder nothing without patched().
 */
class MigrationRun {
  private readonly info = workflowInfo();
  private readonly tracker: Tracker;
  private readonly saga = new Saga();
  /** Everything the migration does; the cancel signal and the deadline cancel it. */
  private readonly main = new CancellationScope();
  /** The control desk (set once the spec is parsed): it holds the cancel's reason. */
  private desk?: MigrationDesk;
  private timedOut = false;
  /** What the ending undid (workflows/saga.ts names), for the failure's message. */
  private readonly ending: { undone: string[]; failedUndo: string[]; kept: boolean } = { undone: [], failedUndo: [], kept: false };
  /** Event webhooks and the result callback (set once the spec is parsed). */
  private callbacks!: Callbacks;
  /** The activities, as the options' timings configure them (set once they are checked). */
  private acts!: MigrationActivities;

  constructor(private readonly options: MigrationOptions) {
    const { info } = this;
    const startedAt = new Date(info.startTime).toISOString();
    const progressByQuery = flags.progressByQuery;
    this.tracker = new Tracker(info.workflowId, info.runId, startedAt, options.resume ? 'FAILED' : 'PENDING', progressByQuery);
    if (options.resume) this.tracker.setState('PENDING', 'ferry retry', startedAt);
    this.tracker.setState('QUEUED', undefined, startedAt);
    this.tracker.setState('RUNNING', 'picked up by a worker');
    setHandler(stateQuery, () => this.tracker.document());
  }

  async run(specInput: unknown): Promise<ResultDocument> {
    const spec = this.parse(specInput);
    this.acts = migrationActivities(this.checkedTimings());
    upsertSearchAttributes([
      { key: FerrySourceKey, value: spec.source },
      { key: FerryTargetKey, value: spec.target },
    ]);
    const desk = new MigrationDesk(spec, this.tracker, () => this.main.cancel());
    this.desk = desk;
    desk.listen();
    const progress = (p: TableProgress) => {
      this.tracker.applyProgress(p);
      derivePhase(this.tracker, spec);
      desk.onProgress(p);
    };
    setHandler(tableProgressSignal, progress);
    const stream = { kind: 'migration' as const, publish: eventStreamActivities(this.checkedTimings()), onEnabled: (where: EventStreamWhere) => this.tracker.streamingTo(where), timings: this.options.timings };
    this.callbacks = new Callbacks(this.info.workflowId, spec.callback, this.acts.notify, stream);
    this.tracker.onEvent = this.callbacks.eventSender();
    if (!this.options.resume && this.options.startedBy && flags.auditedStart) this.tracker.control('start', 'none', 'queued', checkedAudit(this.options.startedBy));
    this.startDeadline(spec);
    const { outcome, failure } = await this.execute(spec, desk, progress);
    return this.end(spec, outcome, failure);
  }

  /** The spec, validated here too: any Temporal client can start this workflow. */
  private parse(specInput: unknown): Spec {
    try {
      return parseWorkflowSpec(specInput);
    } catch (err) {
      const message = err instanceof SpecError ? err.message : String(err);
      this.tracker.error = { message, type: FAILURE.InvalidSpec };
      this.tracker.setPhase('FAILED', 'invalid spec');
      this.tracker.setState('FAILED', 'invalid spec');
      throw ApplicationFailure.nonRetryable(`invalid spec:\n${message}`, FAILURE.InvalidSpec, this.tracker.document());
    }
  }

  /** The options' timings over production's, refused like a bad spec when out of range: any client can give them. */
  private checkedTimings() {
    const problems = timingProblems(this.options.timings);
    if (problems.length === 0) return timingsOf(this.options.timings);
    const message = problems.join('\n');
    this.tracker.error = { message, type: FAILURE.InvalidSpec };
    this.tracker.setPhase('FAILED', 'invalid options');
    this.tracker.setState('FAILED', 'invalid options');
    throw ApplicationFailure.nonRetryable(`invalid options:\n${message}`, FAILURE.InvalidSpec, this.tracker.document());
  }

  /** The deadline is a timer, not an execution timeout: compensation and the callback still run. */
  private startDeadline(spec: Spec): void {
    if (spec.deadlineMs === undefined) return;
    const deadlineMs = spec.deadlineMs;
    void CancellationScope.cancellable(async () => {
      await sleep(deadlineMs);
      this.timedOut = true;
      this.main.cancel();
    }).catch(() => undefined);
  }

  /** The mode's chain, then the bookkeeping released; or, on failure, the compensations. */
  private async execute(spec: Spec, desk: MigrationDesk, progress: (p: TableProgress) => void): Promise<{ outcome: Outcome; failure?: unknown }> {
    const { tracker, saga, options, acts } = this;
    const { steps } = acts;
    const id = this.info.workflowId;
    try {
      await this.main.run(async () => {
        tracker.step('preflight');
        const plan = await this.plan(spec);
        tracker.addTables(plan.tables);
        if (plan.source && plan.target) tracker.servers = { source: plan.source.serverVersion, target: plan.target.serverVersion };
        upsertMemo({ source: spec.source, target: spec.target, tables: tracker.tables.map((t) => `${t.source} → ${t.target}`) });
        tracker.event('MigrationStarted', undefined, { mode: spec.mode, tables: plan.tables.length });
        tracker.step('prepare');
        const ctx: MigrationContext = {
          id,
          spec,
          plan,
          tracker,
          saga,
          options,
          acts,
          children: desk.children,
          progress,
          control: () => desk.forwarded(),
          approved: () => desk.approved,
          approveBy: (audit) => desk.approve(audit),
          targetReadyBeforeCutover: flags.targetReadyBeforeCutover,
          primaryKeyAfterLoad: flags.primaryKeyAfterLoad,
          parentMarksCopying: flags.parentMarksCopying,
        };
        if (spec.mode === 'online') tracker.cutover = await runOnline(ctx);
        else await runFullLoad(ctx);
      });
      // Past the point of no return: the target is complete, nothing to compensate.
      saga.clear();
      tracker.step('finish');
      await CancellationScope.nonCancellable(() => steps.releaseBookkeeping({ migrationId: id, target: spec.target }));
      tracker.setPhase('COMPLETED', spec.mode === 'online' ? 'cut over to the target' : 'all tables copied and validated');
      return { outcome: 'SUCCEEDED' };
    } catch (failure) {
      const outcome: Outcome = this.timedOut ? 'TIMED_OUT' : isCancellation(failure) ? 'CANCELLED' : 'FAILED';
      await this.compensate(spec, outcome, failure);
      return { outcome, failure };
    }
  }

  /**
   * The plan: the one an earlier run stored (`ferry retry`), the one `ferry start` got, or
   * preflight's. A stored plan of thousands of tables (MigrationPlan.stored) has its bookkeeping
   * row on the target already — rollback's undo goes first — and is loaded a page at a time.
   */
  private async plan(spec: Spec): Promise<MigrationPlan> {
    const { options, saga } = this;
    const { steps, checks } = this.acts;
    const id = this.info.workflowId;
    const stored = options.resume ? await steps.storedPlan({ migrationId: id, target: spec.target }) : null;
    const plan = stored ?? givenPlan(options.plan) ?? (await checks.preflight({ migrationId: id, spec, store: true }));
    // The switch is checked again where the migration runs its own preflight (a client that
    // skipped the helper); a retry's stored plan was checked when it was made.
    if (!stored && !givenPlan(options.plan)) await checkSwitch(spec, options.timings);
    if (!plan.stored) return plan;
    if (spec.onFailure === 'rollback') saga.push('dropTargetObjects', () => steps.dropTargetObjects({ migrationId: id, target: spec.target }));
    const tables: TablePlan[] = [];
    for (let from = 0; from < plan.stored.tables; from += PLAN_LOAD_PAGE) {
      tables.push(...(await steps.planTables({ migrationId: id, target: spec.target, from, to: from + PLAN_LOAD_PAGE })));
    }
    if (tables.length !== plan.stored.tables) {
      throw ApplicationFailure.nonRetryable(`the plan stored on the target lists ${tables.length} tables, not the ${plan.stored.tables} preflight planned`, FAILURE.InvalidPlan);
    }
    return { ...plan, tables };
  }

  private async compensate(spec: Spec, outcome: Outcome, failure: unknown): Promise<void> {
    const { tracker, saga } = this;
    const id = this.info.workflowId;
    tracker.error = errorInfo(failure, outcome, this.desk?.cancelReason);
    if (outcome === 'CANCELLED') tracker.setState('CANCELLING', this.desk?.cancelReason ?? 'workflow cancellation requested');
    tracker.setPhase('ROLLING_BACK', tracker.error.message);
    const captureKept = keepCapture(spec, outcome, saga);
    const compensating = saga.size > 0;
    if (compensating) {
      tracker.event('RollbackStarted', undefined, { reason: outcome });
      this.ending.undone = saga.names;
      const failedSteps = await saga.compensate();
      this.ending.failedUndo = failedSteps;
      tracker.event('RolledBack', undefined, failedSteps.length ? { failedSteps } : undefined);
    }
    this.ending.kept = captureKept || (!compensating && spec.onFailure === 'keep');
    if (captureKept) {
      tracker.warnings.push(
        'onFailure: keep — target tables, checkpoints and change capture were left: capture logs every write to the source tables ' +
          `until \`ferry retry ${id}\` resumes from it, or \`ferry cleanup ${id}\` removes what the migration left on both databases`,
      );
    } else if (!compensating && spec.onFailure === 'keep') {
      tracker.warnings.push('onFailure: keep — target tables and checkpoints were left for inspection and `ferry retry`');
    }
    tracker.setPhase('FAILED', outcome);
  }

  /** The result document, the callback (last, always), and how the execution ends. */
  private async end(spec: Spec, outcome: Outcome, failure: unknown): Promise<ResultDocument> {
    const { tracker } = this;
    tracker.step(undefined);
    tracker.endedAt = new Date().toISOString();
    tracker.setState(outcome, outcome === 'SUCCEEDED' ? undefined : tracker.error?.message);
    tracker.event('MigrationFinished', undefined, { state: outcome });
    const result = resultDocument(tracker.document(), spec.metadata);
    await this.callbacks.finish(result);

    if (outcome === 'SUCCEEDED') return result;
    // Cancelled through Temporal itself: end as Canceled, so the Web UI and SDKs see the truth.
    if (outcome === 'CANCELLED' && CancellationScope.current().consideredCancelled) {
      throw new CancelledFailure(tracker.error?.message ?? 'cancelled', [result]);
    }
    throw ApplicationFailure.create({
      // The Web UI shows this at the top of the failure: the outcome, the root cause, what was undone.
      message: endingMessage(tracker.document(), { ...this.ending, deadlineMs: spec.deadlineMs }),
      type: outcome === 'TIMED_OUT' ? FAILURE.MigrationTimedOut : outcome === 'CANCELLED' ? FAILURE.MigrationCancelled : FAILURE.MigrationFailed,
      nonRetryable: true,
      details: [result],
      cause: failure instanceof Error ? failure : undefined,
    });
  }
}

/**
 * Online, onFailure: keep, FAILED: the change capture stays (the cutover's own undo still
 * reopens the freeze). `ferry retry` copies only what the kept checkpoints lack and then applies
 * the change log, and its installCapture finds this migration's capture and reuses it: kept, the
 * log holds every write made while the migration was FAILED; removed, they would be lost. A
 * cancelled or timed-out migration cannot be retried, so its capture goes. (Executions begun
 * before this removed it; their replays must too.)
 */
function keepCapture(spec: Spec, outcome: Outcome, saga: Saga): boolean {
  if (spec.mode !== 'online' || spec.onFailure !== 'keep' || outcome !== 'FAILED') return false;
  return flags.keepCaptureForRetry && saga.discard('releaseSource');
}

function errorInfo(err: unknown, outcome: Outcome, cancelReason?: string): ErrorInfo {
  if (outcome === 'TIMED_OUT') return { message: 'deadline reached before the migration finished', type: FAILURE.DeadlineExceeded };
  if (outcome === 'CANCELLED') return { message: cancelReason ?? 'migration cancelled', type: FAILURE.Cancelled };
  const failure = innermostApplicationFailure(err);
  const root = rootMessage(err);
  const info: ErrorInfo = { message: failure?.message ?? root };
  if (failure?.type) info.type = failure.type;
  if (root !== info.message) info.cause = root;
  return info;
}

/** A plan handed in by the caller (ferry start passes preflight's): checked like any input. */
function givenPlan(input: unknown): MigrationPlan | undefined {
  if (input === undefined) return undefined;
  const checked = checkPlan(input);
  if (!checked.ok) throw ApplicationFailure.nonRetryable(`the plan given to the workflow is not one preflight makes: ${checked.reason}`, FAILURE.InvalidPlan);
  // Part of a plan (the helper's first page, or a stored plan's header): the migration plans itself.
  if (checked.plan.moreTables || checked.plan.stored) {
    throw ApplicationFailure.nonRetryable('the plan given to the workflow does not list all its tables; start the migration without a plan, it runs its own preflight', FAILURE.InvalidPlan);
  }
  return checked.plan;
}
