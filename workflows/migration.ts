/**
 * migrationWorkflow: one migration, workflow id = migration id (docs/architecture.md §2).
 * preflight → the mode's chain (full-load.ts or online.ts) → release bookkeeping; on failure,
 * cancellation or deadline the saga's compensations run in reverse; the result callback last,
 * always. Its argument is the spec itself, so any Temporal SDK can start it.
 */
import {
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  CancelledFailure,
  ChildWorkflowHandle,
  condition,
  isCancellation,
  patched,
  setHandler,
  sleep,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { innermostApplicationFailure, rootMessage } from '../src/failures';
import { FerrySourceKey, FerryTargetKey, PATCHES } from '../src/names';
import { checkThrottle, Spec, SpecError } from '../src/spec';
import { checkPlan, MigrationPlan } from '../src/plan';
import { tablesSharing } from '../src/rate';
import { ErrorInfo, resultDocument, ResultDocument } from '../src/status';
import { checks, notify, steps } from './proxies';
import { COPIED, derivePhase, MigrationContext, MigrationOptions } from './context';
import {
  approveCutoverSignal,
  cancelSignal,
  Control,
  controlSignal,
  pauseSignal,
  resumeSignal,
  stateQuery,
  tableProgressSignal,
  throttleSignal,
} from './definitions';
import { runFullLoad } from './full-load';
import { runOnline } from './online';
import { Saga } from './saga';
import { parseWorkflowSpec } from './spec-input';
import { tableMigrationWorkflow } from './table';
import { Tracker } from './tracker';
import { FAILURE } from '../src/failure-types';

export type { MigrationOptions };

type Outcome = 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'TIMED_OUT';

export async function migrationWorkflow(specInput: unknown, options: MigrationOptions = {}): Promise<ResultDocument> {
  const info = workflowInfo();
  const progressByQuery = patched(PATCHES.progressByQuery);
  const tracker = new Tracker(info.workflowId, info.runId, new Date(info.startTime).toISOString(), options.resume ? 'FAILED' : 'PENDING', progressByQuery);
  if (options.resume) tracker.setState('PENDING', 'ferry retry', new Date(info.startTime).toISOString());
  tracker.setState('QUEUED', undefined, new Date(info.startTime).toISOString());
  tracker.setState('RUNNING', 'picked up by a worker');
  setHandler(stateQuery, () => tracker.document());

  let spec: Spec;
  try {
    spec = parseWorkflowSpec(specInput);
  } catch (err) {
    const message = err instanceof SpecError ? err.message : String(err);
    tracker.error = { message, type: FAILURE.InvalidSpec };
    tracker.setPhase('FAILED', 'invalid spec');
    tracker.setState('FAILED', 'invalid spec');
    throw ApplicationFailure.nonRetryable(`invalid spec:\n${message}`, FAILURE.InvalidSpec, tracker.document());
  }
  upsertSearchAttributes([
    { key: FerrySourceKey, value: spec.source },
    { key: FerryTargetKey, value: spec.target },
  ]);

  // Control: pause, resume, throttle, approve, cancel. Table workflows get control forwarded.
  let control: Control = { paused: false };
  let approved = false;
  const children = new Map<number, ChildWorkflowHandle<typeof tableMigrationWorkflow>>();
  // The rate cap is the migration's: the tables copying at once share it, and each splits its
  // share among its chunks. The share is resent when the number of tables copying changes.
  const sharing = () => tablesSharing(spec.parallelism.tables, tracker.tables.filter((t) => !COPIED.has(t.phase)).length);
  const forwarded = (): Control => (control.rowsPerSecond ? { ...control, tablesSharing: sharing() } : control);
  let sharingSent: number | undefined;
  const forward = () => {
    const c = forwarded();
    sharingSent = c.tablesSharing;
    for (const child of children.values()) void child.signal(controlSignal, c).catch(() => undefined);
  };
  const setControl = (next: Control) => {
    control = next;
    tracker.paused = control.paused;
    forward();
  };
  setHandler(pauseSignal, () => setControl({ ...control, paused: true }));
  setHandler(resumeSignal, () => setControl({ ...control, paused: false }));
  setHandler(throttleSignal, (request) => {
    // Signals come from any client (the temporal CLI too): a bad value is refused, not applied.
    const checked = checkThrottle(request);
    // (Executions begun before this check applied any value: their replays must do the same.)
    if (!checked.ok && patched(PATCHES.refuseInvalidThrottle)) {
      tracker.warnings.push(`ignored a throttle signal: ${checked.reason}`);
      return;
    }
    const t = checked.ok ? checked.value : request;
    setControl({ ...control, rowsPerSecond: t.rowsPerSecond || undefined, batchRows: t.batchRows ?? control.batchRows });
  });
  setHandler(approveCutoverSignal, () => {
    approved = true;
  });
  const main = new CancellationScope();
  let cancelReason: string | undefined;
  setHandler(cancelSignal, (request) => {
    cancelReason = request?.reason ?? 'cancel requested';
    main.cancel();
  });
  setHandler(tableProgressSignal, (p) => {
    tracker.applyProgress(p);
    derivePhase(tracker, spec);
    // (Executions begun before the cap was shared sent control only on signals.)
    if (control.rowsPerSecond && p.phase && sharing() !== sharingSent && patched(PATCHES.shareRateCapAcrossTables)) forward();
  });

  // Event webhooks, when asked for: one delivery per event, each with its own idempotency key.
  const deliveries: Promise<unknown>[] = [];
  if (spec.callback?.events) {
    const { url, secret } = spec.callback;
    tracker.onEvent = (event) => {
      deliveries.push(
        CancellationScope.nonCancellable(() =>
          notify.sendCallback({ url, secret, idempotencyKey: `${info.workflowId}:${event.seq}`, body: { task_id: info.workflowId, event } }),
        ).catch(() => undefined),
      );
    };
  }

  // The deadline is a timer, not an execution timeout: compensation and the callback still run.
  let timedOut = false;
  if (spec.deadlineMs !== undefined) {
    const deadlineMs = spec.deadlineMs;
    void CancellationScope.cancellable(async () => {
      await sleep(deadlineMs);
      timedOut = true;
      main.cancel();
    }).catch(() => undefined);
  }

  const saga = new Saga();
  let outcome: Outcome = 'SUCCEEDED';
  let failure: unknown;
  try {
    await main.run(async () => {
      const stored = options.resume ? await steps.storedPlan({ migrationId: info.workflowId, target: spec.target }) : null;
      const plan = stored ?? givenPlan(options.plan) ?? (await checks.preflight({ migrationId: info.workflowId, spec }));
      tracker.addTables(plan.tables);
      upsertMemo({ source: spec.source, target: spec.target, tables: tracker.tables.map((t) => `${t.source} → ${t.target}`) });
      tracker.event('MigrationStarted', undefined, { mode: spec.mode, tables: plan.tables.length });
      const ctx: MigrationContext = {
        id: info.workflowId,
        spec,
        plan,
        tracker,
        saga,
        options,
        children,
        control: forwarded,
        approved: () => approved,
        targetReadyBeforeCutover: patched(PATCHES.targetReadyBeforeCutover),
      };
      if (spec.mode === 'online') tracker.cutover = await runOnline(ctx);
      else await runFullLoad(ctx);
    });
    // Past the point of no return: the target is complete, nothing to compensate.
    saga.clear();
    await CancellationScope.nonCancellable(() => steps.releaseBookkeeping({ migrationId: info.workflowId, target: spec.target }));
    tracker.setPhase('COMPLETED', spec.mode === 'online' ? 'cut over to the target' : 'all tables copied and validated');
  } catch (err) {
    failure = err;
    outcome = timedOut ? 'TIMED_OUT' : isCancellation(err) ? 'CANCELLED' : 'FAILED';
    tracker.error = errorInfo(err, outcome, cancelReason);
    if (outcome === 'CANCELLED') tracker.setState('CANCELLING', cancelReason ?? 'workflow cancellation requested');
    tracker.setPhase('ROLLING_BACK', tracker.error.message);
    const captureKept = keepCapture(spec, outcome, saga);
    const compensating = saga.size > 0;
    if (compensating) {
      tracker.event('RollbackStarted', undefined, { reason: outcome });
      const failedSteps = await saga.compensate();
      tracker.event('RolledBack', undefined, failedSteps.length ? { failedSteps } : undefined);
    }
    if (captureKept) {
      tracker.warnings.push(
        'onFailure: keep — target tables, checkpoints and change capture were left: capture logs every write to the source tables ' +
          `until \`ferry retry ${info.workflowId}\` resumes from it, or \`ferry cleanup ${info.workflowId}\` removes what the migration left on both databases`,
      );
    } else if (!compensating && spec.onFailure === 'keep') {
      tracker.warnings.push('onFailure: keep — target tables and checkpoints were left for inspection and `ferry retry`');
    }
    tracker.setPhase('FAILED', outcome);
  }

  tracker.endedAt = new Date().toISOString();
  tracker.setState(outcome, outcome === 'SUCCEEDED' ? undefined : tracker.error?.message);
  tracker.event('MigrationFinished', undefined, { state: outcome });
  const result = resultDocument(tracker.document(), spec.metadata);
  if (spec.callback) {
    const { url, secret } = spec.callback;
    result.callback = await CancellationScope.nonCancellable(() =>
      notify
        .sendCallback({ url, secret, idempotencyKey: info.workflowId, body: result })
        .then(() => ({ delivered: true }))
        .catch((err: unknown) => ({ delivered: false, error: rootMessage(err) })),
    );
  }
  await CancellationScope.nonCancellable(() => Promise.all(deliveries));
  upsertMemo({ result });
  await condition(allHandlersFinished);

  if (outcome === 'SUCCEEDED') return result;
  // Cancelled through Temporal itself: end as Canceled, so the Web UI and SDKs see the truth.
  if (outcome === 'CANCELLED' && CancellationScope.current().consideredCancelled) {
    throw new CancelledFailure(tracker.error?.message ?? 'cancelled', [result]);
  }
  throw ApplicationFailure.create({
    message: tracker.error?.message ?? outcome,
    type: outcome === 'TIMED_OUT' ? FAILURE.MigrationTimedOut : outcome === 'CANCELLED' ? FAILURE.MigrationCancelled : FAILURE.MigrationFailed,
    nonRetryable: true,
    details: [result],
    cause: failure instanceof Error ? failure : undefined,
  });
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
  return patched(PATCHES.keepCaptureForRetry) && saga.discard('releaseSource');
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
  return checked.plan;
}
