/**
 * migrationWorkflow: one migration, workflow id = migration id (DESIGN.md §2).
 * Chain: preflight → prepareTarget → fan-out of one tableMigrationWorkflow per table (bounded)
 * → finalizeTarget; saga compensation on failure, cancellation or deadline; the result
 * callback last, always. Its argument is the spec itself, so any Temporal SDK can start it.
 */
import {
  ActivityCancellationType,
  ApplicationFailure,
  CancellationScope,
  CancelledFailure,
  ChildWorkflowCancellationType,
  ChildWorkflowHandle,
  isCancellation,
  proxyActivities,
  setHandler,
  sleep,
  startChild,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
  allHandlersFinished,
  condition,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import { innermostApplicationFailure, rootMessage } from '../src/failures';
import { FerrySourceKey, FerryTargetKey } from '../src/names';
import { MigrationPlan } from '../src/plan';
import { parseSpec, Spec, SpecError } from '../src/spec';
import { resultDocument, ResultDocument } from '../src/status';
import { runBounded } from './bounded';
import {
  cancelSignal,
  Control,
  controlSignal,
  pauseSignal,
  resumeSignal,
  stateQuery,
  tableProgressSignal,
  throttleSignal,
} from './definitions';
import { Saga } from './saga';
import { tableMigrationWorkflow, TableWorkflowResult } from './table';
import { Tracker } from './tracker';

const steps = proxyActivities<Activities>({
  startToCloseTimeout: '30 minutes',
  heartbeatTimeout: '1 minute',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

const checks = proxyActivities<Activities>({
  startToCloseTimeout: '5 minutes',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds', maximumAttempts: 3 },
});

const notify = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '1 minute',
    maximumAttempts: 8,
    nonRetryableErrorTypes: ['CallbackRejected', 'CallbackSecretMissing'],
  },
});

export interface MigrationOptions {
  /** Continue-as-new threshold handed to table workflows (history events). */
  tableHistoryLimit?: number;
  /**
   * The plan `ferry start` got from preflight moments before; without it (any other caller)
   * the workflow runs preflight itself.
   */
  plan?: MigrationPlan;
}

export async function migrationWorkflow(specInput: unknown, options: MigrationOptions = {}): Promise<ResultDocument> {
  const info = workflowInfo();
  const tracker = new Tracker(info.workflowId, info.runId, new Date(info.startTime).toISOString());
  tracker.setState('QUEUED', undefined, new Date(info.startTime).toISOString());
  tracker.setState('RUNNING', 'picked up by a worker');
  setHandler(stateQuery, () => tracker.document());

  let spec: Spec;
  try {
    spec = parseSpec(specInput);
  } catch (err) {
    const message = err instanceof SpecError ? err.message : String(err);
    tracker.error = { message, type: 'InvalidSpec' };
    tracker.setPhase('FAILED', 'invalid spec');
    tracker.setState('FAILED', 'invalid spec');
    throw ApplicationFailure.nonRetryable(`invalid spec:\n${message}`, 'InvalidSpec', tracker.document());
  }
  upsertSearchAttributes([
    { key: FerrySourceKey, value: spec.source },
    { key: FerryTargetKey, value: spec.target },
  ]);

  // Control: pause, resume, throttle, cancel. Children get the control state forwarded.
  let control: Control = { paused: false };
  const children = new Map<number, ChildWorkflowHandle<typeof tableMigrationWorkflow>>();
  const forward = () => {
    tracker.paused = control.paused;
    for (const child of children.values()) void child.signal(controlSignal, control).catch(() => undefined);
  };
  setHandler(pauseSignal, () => {
    control = { ...control, paused: true };
    forward();
  });
  setHandler(resumeSignal, () => {
    control = { ...control, paused: false };
    forward();
  });
  setHandler(throttleSignal, (t) => {
    control = {
      ...control,
      rowsPerSecond: t.rowsPerSecond || undefined,
      batchRows: t.batchRows ?? control.batchRows,
    };
    forward();
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
  });

  // Event webhooks, when asked for: one delivery per event, each with its own idempotency key.
  const deliveries: Promise<unknown>[] = [];
  if (spec.callback?.events) {
    const callback = spec.callback;
    tracker.onEvent = (event) => {
      deliveries.push(
        CancellationScope.nonCancellable(() =>
          notify.sendCallback({ url: callback.url, secret: callback.secret, idempotencyKey: `${info.workflowId}:${event.seq}`, body: { task_id: info.workflowId, event } }),
        ).catch(() => undefined),
      );
    };
  }

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
  let outcome: 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'TIMED_OUT' = 'SUCCEEDED';
  let failure: unknown;
  try {
    await main.run(async () => {
      const plan = options.plan ?? (await checks.preflight({ migrationId: info.workflowId, spec }));
      tracker.addTables(plan.tables);
      upsertMemo({ source: spec.source, target: spec.target, tables: tracker.tables.map((t) => `${t.source} → ${t.target}`) });
      tracker.event('MigrationStarted', undefined, { mode: spec.mode, tables: plan.tables.length });

      if (spec.onFailure === 'rollback') {
        saga.push('dropTargetObjects', () => steps.dropTargetObjects({ migrationId: info.workflowId, target: spec.target }));
      }
      await steps.prepareTarget({ migrationId: info.workflowId, source: spec.source, target: spec.target, plan, truncate: spec.truncate });
      tracker.setPhase('FULL_MIGRATING', 'target prepared');

      await copyTables(spec, plan, tracker, () => control, children, options);
      derivePhase(tracker, spec);

      const finalized = await steps.finalizeTarget({
        migrationId: info.workflowId,
        source: spec.source,
        target: spec.target,
        tables: plan.tables,
      });
      for (const { table, changes } of finalized.writtenDuringCopy) {
        tracker.warnings.push(
          `${table} took about ${changes} row changes while it was copied; validation compared the result, but full mode assumes a quiet source — use mode: online for tables that keep changing`,
        );
      }
      for (const fk of finalized.skippedForeignKeys) {
        tracker.warnings.push(`foreign key ${fk} not created: the referenced table is not on the target`);
      }
    });
    // Past the point of no return: the target is complete, nothing to compensate.
    saga.clear();
    await CancellationScope.nonCancellable(() => steps.releaseBookkeeping({ migrationId: info.workflowId, target: spec.target }));
    tracker.setPhase('COMPLETED', 'all tables copied and validated');
  } catch (err) {
    failure = err;
    outcome = timedOut ? 'TIMED_OUT' : isCancellation(err) ? 'CANCELLED' : 'FAILED';
    tracker.error = errorInfo(err, outcome, cancelReason);
    if (outcome === 'CANCELLED') tracker.setState('CANCELLING', cancelReason ?? 'workflow cancellation requested');
    tracker.setPhase('ROLLING_BACK', tracker.error.message);
    if (saga.size > 0) {
      tracker.event('RollbackStarted', undefined, { reason: outcome });
      const failedSteps = await saga.compensate();
      tracker.event('RolledBack', undefined, failedSteps.length ? { failedSteps } : undefined);
    } else if (spec.onFailure === 'keep') {
      tracker.warnings.push('onFailure: keep — target tables and checkpoints were left for inspection and `ferry retry`');
    }
    tracker.setPhase('FAILED', outcome);
  }

  tracker.endedAt = new Date().toISOString();
  tracker.setState(outcome, outcome === 'SUCCEEDED' ? undefined : tracker.error?.message);
  tracker.event('MigrationFinished', undefined, { state: outcome });
  const result = resultDocument(tracker.document(), spec.metadata);
  if (spec.callback) {
    const callback = spec.callback;
    result.callback = await CancellationScope.nonCancellable(() =>
      notify
        .sendCallback({ url: callback.url, secret: callback.secret, idempotencyKey: info.workflowId, body: result })
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
    type: outcome === 'TIMED_OUT' ? 'MigrationTimedOut' : outcome === 'CANCELLED' ? 'MigrationCancelled' : 'MigrationFailed',
    nonRetryable: true,
    details: [result],
    cause: failure instanceof Error ? failure : undefined,
  });
}

async function copyTables(
  spec: Spec,
  plan: MigrationPlan,
  tracker: Tracker,
  control: () => Control,
  children: Map<number, ChildWorkflowHandle<typeof tableMigrationWorkflow>>,
  options: MigrationOptions,
): Promise<TableWorkflowResult[]> {
  const info = workflowInfo();
  const results: TableWorkflowResult[] = [];
  await runBounded(plan.tables, spec.parallelism.tables, async (table) => {
    const child = await startChild(tableMigrationWorkflow, {
      workflowId: `${info.workflowId}/table-${table.index}`,
      cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
      staticSummary: `${tracker.tables[table.index].source} → ${tracker.tables[table.index].target}`,
      args: [
        {
          migrationId: info.workflowId,
          parentWorkflowId: info.workflowId,
          source: spec.source,
          target: spec.target,
          table,
          batchRows: spec.batchRows,
          validation: spec.validation,
          chunkParallelism: spec.parallelism.chunks,
          control: control(),
          historyLimit: options.tableHistoryLimit,
        },
      ],
    });
    children.set(table.index, child);
    try {
      results[table.index] = await child.result();
    } finally {
      children.delete(table.index);
    }
  });
  return results;
}

/** The migration's phase follows its tables: all copied → FULL_DONE, then VALIDATING. */
function derivePhase(tracker: Tracker, spec: Spec): void {
  const phases = tracker.tables.map((t) => t.phase);
  const copied = phases.length > 0 && phases.every((p) => p === 'FULL_DONE' || p === 'VALIDATING' || p === 'COMPLETED');
  if (tracker.phase.state === 'FULL_MIGRATING' && copied) tracker.setPhase('FULL_DONE', 'every table copied');
  if (tracker.phase.state === 'FULL_DONE' && spec.validation !== 'none' && copied) {
    tracker.setPhase('VALIDATING', `validation: ${spec.validation}`);
  }
}

function errorInfo(err: unknown, outcome: string, cancelReason?: string) {
  if (outcome === 'TIMED_OUT') return { message: 'deadline reached before the migration finished', type: 'DeadlineExceeded' };
  if (outcome === 'CANCELLED') return { message: cancelReason ?? 'migration cancelled', type: 'Cancelled' };
  const failure = innermostApplicationFailure(err);
  return {
    message: failure?.message ?? rootMessage(err),
    type: failure?.type ?? undefined,
    cause: rootMessage(err) !== failure?.message ? rootMessage(err) : undefined,
  };
}
