/**
 * FerryClient: the facade other services import (pg-boss style: one public class). It speaks
 * only Temporal — the databases are reached by the workers — so it needs no connection URLs.
 */
import { randomBytes } from 'node:crypto';
import { Client, Connection, WorkflowExecutionAlreadyStartedError, WorkflowHandle, WorkflowNotFoundError } from '@temporalio/client';
import { TypedSearchAttributes, WorkflowIdConflictPolicy } from '@temporalio/common';
import { clientDataConverterFromEnv } from '../codec';
import { RefusedError } from '../core/errors';
import { migrationStaticDetails } from '../core/details';
import { innermostApplicationFailure, isPreflightRefusal } from '../core/failures';
import type { CleanupInput, CleanupResult } from '../../workflows/cleanup';
import type { ChangePreflightResult } from '../../activities/change-preflight';
import { approveCutoverSignal, cancelSignal, pauseSignal, resumeSignal, RetireState, retireStateQuery, revertSignal, throttleSignal, ThrottleRequest } from '../core/signals';
import { ChangePlan, isChangePlanInput, parseChangePlan } from '../core/change-plan';
import { ChangeResultDocument, ChangeStatusDocument } from '../core/change-status';
import { connectionOptions, TemporalConfig, temporalConfig } from '../config';
import { CHANGE_CLEANUP_WORKFLOW, CHANGE_PREFLIGHT_WORKFLOW, CHANGE_WORKFLOW, CLEANUP_WORKFLOW, FerryPhaseKey, FerrySourceKey, FerryStateKey, FerryTargetKey, MIGRATION_WORKFLOW, PREFLIGHT_WORKFLOW, UNFREEZE_WORKFLOW, workflowIds } from '../core/names';
import { MigrationPlan } from '../core/plan';
import { checkThrottle, parseSpec, Spec } from '../core/spec';
import { Audit, checkedAudit, ResultDocument, StatusDocument } from '../core/status';
import { ReadOptions, StreamedEvent, streamEvents } from './events';
import { FAILURE, failureTypeOf } from '../core/failure-types';
import { timingProblems, TimingsInput } from '../core/timings';
import { BATCH_ROWS } from '../core/spec-limits';
import { CHANGE_LIMITS } from '../core/change-limits';
import { MigrationSummary, StatusReader } from './status-reader';

export type { MigrationSummary };

export interface StartOptions {
  /** Overrides spec.id. */
  id?: string;
  /** Skip the preflight helper (the workflow runs its own preflight anyway). */
  skipPreflight?: boolean;
  /** Table workflows continue as new after this many history events (default 10,000). */
  tableHistoryLimit?: number;
  /** Shorter (or longer) waits than production's: heartbeat timeout, re-check period, idle cap, callback retries, backfill slice (src/core/timings.ts). */
  timings?: TimingsInput;
  /** Who starts it and why: a `start` control in the status and the result. */
  audit?: Audit;
}

/** What every start of a client gives unless the start says otherwise. */
export interface StartDefaults {
  timings?: TimingsInput;
}

export interface StartedMigration {
  id: string;
  runId: string;
  plan?: MigrationPlan;
  /** false when a migration with this id was already running and is returned instead. */
  started: boolean;
}

export interface StartedChange {
  id: string;
  runId: string;
  preflight?: ChangePreflightResult;
  started: boolean;
}

export { RefusedError };

export interface CleanupOutcome {
  /** false: a table's lock was busy; the cleanup goes on in the background as `workflowId`. */
  done: boolean;
  workflowId: string;
  /** The migration had completed its cutover: the target's tables stay. */
  completed?: boolean;
  /** The freeze went too (else it stays: `ferry unfreeze` lifts it). */
  freezeRemoved?: boolean;
  /** What was dropped on the target (a change plan: the shadows of its rewrites). */
  dropped?: string[];
  /** A change plan was cleaned up (its database is source and target). */
  change?: boolean;
  /** A change plan: capture a busy lock kept (no longer recording). */
  pending?: string[];
}

export function generateMigrationId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `ferry-${stamp}-${randomBytes(3).toString('hex')}`;
}

export class FerryClient {
  private readonly reader: StatusReader;

  private constructor(
    readonly client: Client,
    readonly config: TemporalConfig,
    private readonly ownsConnection: Connection | undefined,
    private readonly defaults: StartDefaults = {},
  ) {
    this.reader = new StatusReader(client);
  }

  static async connect(config: Partial<TemporalConfig> = {}, env: NodeJS.ProcessEnv = process.env): Promise<FerryClient> {
    const full = { ...temporalConfig(env), ...config };
    // FERRY_CODEC_KEY: the workers' payload codec, or this client could not read what they wrote.
    const dataConverter = clientDataConverterFromEnv(env);
    const connection = await Connection.connect(connectionOptions(full));
    return new FerryClient(new Client({ connection, namespace: full.namespace, dataConverter }), full, connection);
  }

  /** Wraps an existing Temporal client (tests, services that already hold one); `defaults` go with every start. */
  static fromClient(client: Client, config: Partial<TemporalConfig> = {}, defaults: StartDefaults = {}): FerryClient {
    return new FerryClient(client, { ...temporalConfig(), ...config, namespace: client.options.namespace }, undefined, defaults);
  }

  /** The start's timings (or the client's), checked: a bad one refuses the start, naming the field. */
  private timingsOf(options: { timings?: TimingsInput }): { timings?: TimingsInput } {
    const timings = options.timings ?? this.defaults.timings;
    if (timings === undefined) return {};
    const problems = timingProblems(timings);
    if (problems.length > 0) throw new RefusedError(problems.join('; '), FAILURE.InvalidSpec);
    return { timings };
  }

  async close(): Promise<void> {
    await this.ownsConnection?.close();
  }

  /** Connects from the environment, runs `fn`, and closes: one CLI verb's lifetime. */
  static async using<T>(fn: (client: FerryClient) => Promise<T>): Promise<T> {
    const client = await FerryClient.connect();
    try {
      return await fn(client);
    } finally {
      await client.close();
    }
  }

  handle(id: string): WorkflowHandle {
    return this.client.workflow.getHandle(id);
  }

  /** Runs preflight on the workers; throws RefusedError when the migration cannot work. */
  async preflight(specInput: unknown, migrationId: string): Promise<MigrationPlan> {
    return this.runPreflight<MigrationPlan>(PREFLIGHT_WORKFLOW, specInput, migrationId);
  }

  /** A preflight helper workflow (migration or change plan), its refusal as a RefusedError. */
  private async runPreflight<T>(workflowType: string, input: unknown, id: string): Promise<T> {
    let result: unknown;
    try {
      result = await this.client.workflow.execute(workflowType, {
        taskQueue: this.config.taskQueue,
        workflowId: `${id}.preflight.${randomBytes(4).toString('hex')}`,
        // This client understands a refusal returned as the result (preflight.ts PreflightOptions).
        args: [input, id, { refusalAsResult: true }],
        workflowExecutionTimeout: '10 minutes',
        staticSummary: `Ferry preflight of ${workflowType === CHANGE_PREFLIGHT_WORKFLOW ? 'change plan' : 'migration'} ${id}: checks before it starts; starts and changes nothing`,
      });
    } catch (err) {
      // Helpers begun before they returned refusals failed with them.
      const failure = innermostApplicationFailure(err);
      if (failure) throw new RefusedError(failure.message, failureTypeOf(failure.type) ?? FAILURE.Refused, { cause: err });
      throw err;
    }
    if (isPreflightRefusal(result)) throw new RefusedError(result.refused.message, failureTypeOf(result.refused.type) ?? FAILURE.Refused);
    return result as T;
  }

  /**
   * Validates the spec, runs preflight through the workers, then starts migrationWorkflow and
   * returns as soon as it is running. Starting an id that is already running returns that one.
   */
  async start(specInput: unknown, options: StartOptions = {}): Promise<StartedMigration> {
    if (isChangePlanInput(specInput)) {
      const started = await this.startChange(specInput, options);
      return { id: started.id, runId: started.runId, started: started.started };
    }
    // --id overrides spec.id and is checked like it, before anything runs.
    const spec: Spec = parseSpec(options.id ? { ...(specInput as Record<string, unknown>), id: options.id } : specInput);
    const timed = this.timingsOf(options);
    const id = spec.id ?? generateMigrationId();
    const running = await this.runningExecution(id);
    if (running) return { id, runId: running, started: false };
    const plan = options.skipPreflight ? undefined : await this.preflight(specInput, id);
    const input = { ...(specInput as Record<string, unknown>), id };
    try {
      const handle = await this.client.workflow.start(MIGRATION_WORKFLOW, {
        ...this.startOptions(id, spec, input),
        // A plan of thousands of tables comes from preflight as its first page (moreTables): the
        // migration runs its own preflight, which stores the whole plan on the target.
        args: [input, { plan: plan?.moreTables ? undefined : plan, tableHistoryLimit: options.tableHistoryLimit, ...timed, ...startedBy(options.audit) }],
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
      });
      return { id, runId: handle.firstExecutionRunId, plan, started: true };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        throw new RefusedError(`migration ${id} already exists and has ended; choose another id (or \`ferry retry ${id}\` if it failed)`, FAILURE.IdInUse, {
          cause: err,
        });
      }
      throw err;
    }
  }

  /**
   * `ferry retry`: FAILED → PENDING. A new run of the same migration id that resumes from the
   * plan and checkpoints a failed run left on the target (`onFailure: keep`) and, online, from
   * the change capture it kept on the source; after a rollback there is nothing left, and it
   * starts afresh.
   */
  async retry(id: string): Promise<StartedMigration> {
    const d = await this.handle(id).describe();
    const state = d.typedSearchAttributes.get(FerryStateKey) ?? d.status.name;
    if (d.status.name === 'RUNNING' || state !== 'FAILED') {
      throw new RefusedError(`migration ${id} is ${d.status.name === 'RUNNING' ? 'still running' : state}; only a FAILED migration can be retried`, FAILURE.NotFailed);
    }
    const input = d.memo?.spec;
    if (!input) throw new RefusedError(`migration ${id} did not record its spec; start it again with ferry start`, FAILURE.NoSpec);
    const spec = parseSpec(input);
    const handle = await this.client.workflow.start(MIGRATION_WORKFLOW, {
      ...this.startOptions(id, spec, input),
      args: [input, { resume: true }],
    });
    return { id, runId: handle.firstExecutionRunId, started: true };
  }

  /** Task queue, search attributes, memo (with the spec, for retry) and the Web UI summary. */
  private startOptions(id: string, spec: Spec, input: unknown) {
    return {
      taskQueue: this.config.taskQueue,
      workflowId: id,
      typedSearchAttributes: new TypedSearchAttributes([
        { key: FerryStateKey, value: 'QUEUED' },
        { key: FerryPhaseKey, value: 'PENDING' },
        { key: FerrySourceKey, value: spec.source },
        { key: FerryTargetKey, value: spec.target },
      ]),
      memo: { source: spec.source, target: spec.target, mode: spec.mode, spec: input },
      staticSummary: `Ferry ${spec.mode} migration ${spec.source} → ${spec.target}: ${spec.selection ? `tables by pattern (${spec.selection.include.map((i) => i.pattern.text).join(', ')})` : `${spec.tables.length} table(s)`}`,
      staticDetails: migrationStaticDetails(id, spec),
    };
  }

  private async runningExecution(id: string): Promise<string | undefined> {
    try {
      const d = await this.handle(id).describe();
      return d.status.name === 'RUNNING' ? d.runId : undefined;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    }
  }

  /** The status document (see StatusReader.status). */
  /** Ferry's events from the NATS JetStream stream (FERRY_NATS_URL in this process's environment): replayed, then live with `follow`. */
  events(options: ReadOptions = {}): AsyncGenerator<StreamedEvent> {
    return streamEvents(options);
  }

  status(id: string): Promise<StatusDocument> {
    return this.reader.status(id);
  }

  /** Waits for the migration to end and returns its result document, for every outcome. */
  result(id: string): Promise<ResultDocument> {
    return this.reader.result(id);
  }

  /** Migrations and change plans (not helper workflows), newest first, optionally by FerryState. */
  list(filter: { state?: string; limit?: number } = {}): Promise<MigrationSummary[]> {
    return this.reader.list(filter);
  }

  kindOf(id: string): Promise<'change' | 'migration'> {
    return this.reader.kindOf(id);
  }

  changeStatus(id: string): Promise<ChangeStatusDocument> {
    return this.reader.changeStatus(id);
  }

  changeResult(id: string): Promise<ChangeResultDocument> {
    return this.reader.changeResult(id);
  }

  /** Runs a change plan's preflight on the workers; throws RefusedError when it is refused. */
  async preflightChange(planInput: unknown, changeId: string): Promise<ChangePreflightResult> {
    return this.runPreflight<ChangePreflightResult>(CHANGE_PREFLIGHT_WORKFLOW, planInput, changeId);
  }

  /**
   * Validates a change plan (`kind: change`), runs its preflight through the workers, then starts
   * changeWorkflow and returns once it runs. A refusal (bad plan, unsafe statement, missing
   * table) throws before anything changed.
   */
  async startChange(planInput: unknown, options: { id?: string; skipPreflight?: boolean; historyLimit?: number; timings?: TimingsInput; audit?: Audit } = {}): Promise<StartedChange> {
    const input = options.id ? { ...(planInput as Record<string, unknown>), id: options.id } : planInput;
    const plan: ChangePlan = parseChangePlan(input);
    const timed = this.timingsOf(options);
    const id = plan.id ?? generateMigrationId().replace(/^ferry-/, 'change-');
    const running = await this.runningExecution(id);
    if (running) return { id, runId: running, started: false };
    const withId = { ...(input as Record<string, unknown>), id };
    const preflight = options.skipPreflight ? undefined : await this.preflightChange(withId, id);
    try {
      const handle = await this.client.workflow.start(CHANGE_WORKFLOW, {
        taskQueue: this.config.taskQueue,
        workflowId: id,
        // The workflow runs preflight again itself (a result passed in is not trusted).
        args: [withId, { historyLimit: options.historyLimit, ...timed, ...startedBy(options.audit) }],
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
        typedSearchAttributes: new TypedSearchAttributes([
          { key: FerryStateKey, value: 'QUEUED' },
          { key: FerryPhaseKey, value: 'PENDING' },
          { key: FerrySourceKey, value: plan.database },
          { key: FerryTargetKey, value: plan.database },
        ]),
        memo: { kind: 'change', database: plan.database, spec: withId },
        staticSummary: `Ferry change plan on ${plan.database}: ${plan.steps.length} step(s)`,
      });
      return { id, runId: handle.firstExecutionRunId, preflight, started: true };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        throw new RefusedError(`change ${id} already exists and has ended; choose another id`, FAILURE.IdInUse, { cause: err });
      }
      throw err;
    }
  }

  /**
   * Swaps a rewrite step back to its old table (within keepOld): signals the step's retirement
   * workflow and waits until the revert ended. `step` is 1-based; absent, the plan's one swapped
   * rewrite. Refused (nothing changed) when there is none, or its keepOld has passed.
   */
  async revert(id: string, step: number | undefined, audit: Audit = {}, timeoutMs = 30 * 60_000): Promise<RetireState & { step: number }> {
    const index = step === undefined ? await this.swappedRewrite(id) : step - 1;
    const handle = this.handle(workflowIds.retire(id, index));
    const d = await handle.describe().catch(() => undefined);
    if (!d) throw new RefusedError(`change ${id} has no swapped rewrite at step ${index + 1}`, FAILURE.NothingToRevert);
    if (d.status.name !== 'RUNNING') throw new RefusedError(`change ${id} step ${index + 1}: keepOld has passed and its old table was dropped; nothing to revert to`, FAILURE.NothingToRevert);
    const before = await handle.query(retireStateQuery);
    if (before.phase !== 'KEEPING') throw new RefusedError(`change ${id} step ${index + 1} is ${before.phase.toLowerCase()} already`, FAILURE.NothingToRevert);
    const failuresBefore = before.failures?.length ?? 0;
    await handle.signal(revertSignal, checkedAudit(audit));
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = await handle.query(retireStateQuery);
      if (s.phase === 'REVERTED' || (s.failures?.length ?? 0) > failuresBefore) return { ...s, step: index + 1 };
      if (Date.now() > deadline) throw new Error(`change ${id} step ${index + 1}: the revert did not end within ${timeoutMs / 1000}s; ferry revert ${id} shows its state again`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  /** The index of a change plan's one rewrite step that has swapped. */
  private async swappedRewrite(id: string): Promise<number> {
    const status = await this.changeStatus(id).catch((err: unknown) => {
      if (err instanceof WorkflowNotFoundError) throw new RefusedError(`there is no change plan ${id}`, FAILURE.NothingToRevert);
      throw err;
    });
    const steps = status.steps.filter((s) => s.kind === 'rewrite' && s.state === 'SUCCEEDED');
    if (steps.length === 0) throw new RefusedError(`change ${id} has no rewrite step that swapped; nothing to revert`, FAILURE.NothingToRevert);
    if (steps.length > 1) throw new RefusedError(`change ${id} has ${steps.length} swapped rewrite steps (${steps.map((s) => s.index + 1).join(', ')}): name one with --step`, FAILURE.NothingToRevert);
    return steps[0].index;
  }

  // Control signals take an optional audit — who sends it and why — recorded in the status
  // document's transitions and as a ControlReceived event.
  async cancel(id: string, reason?: string, actor?: string): Promise<void> {
    await this.handle(id).signal(cancelSignal, checkedAudit({ reason, actor }));
  }

  async approve(id: string, audit: Audit = {}): Promise<void> {
    await this.handle(id).signal(approveCutoverSignal, checkedAudit(audit));
  }

  async pause(id: string, audit: Audit = {}): Promise<void> {
    await this.handle(id).signal(pauseSignal, checkedAudit(audit));
  }

  async resume(id: string, audit: Audit = {}): Promise<void> {
    await this.handle(id).signal(resumeSignal, checkedAudit(audit));
  }

  async throttle(id: string, request: ThrottleRequest, audit: Audit = {}): Promise<void> {
    // batchRows in the product's range: a change plan's backfill batches are smaller than a copy's.
    const change = request && typeof request === 'object' && request.batchRows !== undefined && (await this.kindOf(id)) === 'change';
    const checked = checkThrottle(request, change ? CHANGE_LIMITS.backfillBatchRows : BATCH_ROWS);
    if (!checked.ok) throw new RefusedError(checked.reason, FAILURE.InvalidThrottle);
    await this.handle(id).signal(throttleSignal, checked.value, checkedAudit(audit));
  }

  /**
   * Lifts the write freeze an online cutover left on the source (`cutover.afterwards:
   * keep-frozen`). Runs a short helper workflow on the workers, which hold the connections.
   */
  async unfreeze(id: string): Promise<{ unfrozen: string[]; pending?: string[] }> {
    const d = await this.handle(id).describe();
    const source = d.memo?.source;
    if (typeof source !== 'string') throw new RefusedError(`migration ${id} has no recorded source connection`, FAILURE.UnknownMigration);
    return this.client.workflow.execute(UNFREEZE_WORKFLOW, {
      taskQueue: this.config.taskQueue,
      workflowId: `${id}.unfreeze.${randomBytes(4).toString('hex')}`,
      args: [id, source],
      workflowExecutionTimeout: '10 minutes',
      staticSummary: `Ferry unfreeze of migration ${id}: lifts the write freeze on ${source}`,
    });
  }

  /**
   * `ferry cleanup`: removes what an ended migration left behind. One that SUCCEEDED loses
   * leftover capture only (its freeze stays as cutover.afterwards said). Any other — FAILED with
   * `onFailure: keep` and never retried, or terminated, when no compensation ran at all — is
   * judged by its bookkeeping: a target marked complete (terminated after the drain) keeps its
   * tables and its freeze; otherwise capture, guard and freeze leave the source and what the
   * migration created leaves the target, as its rollback would have done. Waits up to `waitMs`
   * for the cleanup workflow, which goes on in the background after that.
   */
  async cleanup(id: string, waitMs = 60_000): Promise<CleanupOutcome> {
    const d = await this.handle(id).describe();
    if (d.memo?.kind === 'change') return this.cleanupChange(id, d.status.name, d.memo.spec, waitMs);
    if (d.status.name === 'RUNNING') {
      throw new RefusedError(`migration ${id} is still running; cancel it instead (its rollback removes what it made)`, FAILURE.StillRunning);
    }
    const { source, target, spec } = d.memo ?? {};
    if (typeof source !== 'string' || typeof target !== 'string') throw new RefusedError(`migration ${id} has no recorded connections`, FAILURE.UnknownMigration);
    const succeeded = (d.typedSearchAttributes.get(FerryStateKey) ?? d.status.name) === 'SUCCEEDED';
    const input: CleanupInput = succeeded
      ? { migrationId: id, source, freeze: afterwardsOf(spec) === 'unfreeze' ? 'remove' : 'keep' }
      : { migrationId: id, source, freeze: 'remove', target };
    // After a success a background cleanup of the same migration may be running already: wait
    // for that one. Otherwise a run of its own, which also looks at the target.
    const workflowId = succeeded ? workflowIds.cleanup(id) : `${workflowIds.cleanup(id)}-${randomBytes(3).toString('hex')}`;
    const handle = await this.client.workflow.start(CLEANUP_WORKFLOW, {
      taskQueue: this.config.taskQueue,
      workflowId,
      args: [input],
      workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
      staticSummary: `Ferry cleanup of migration ${id}: removes what it left on ${succeeded ? source : `${source} and ${target}`}`,
    });
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), waitMs)));
    try {
      const result = await Promise.race([handle.result() as Promise<CleanupResult>, waited]);
      if (!result) return { done: false, workflowId };
      const completed = succeeded || result.completed === true;
      // A completed cutover keeps its freeze, unless the migration itself asked to lift it.
      const freezeRemoved = !completed || (succeeded && input.freeze === 'remove');
      return { done: true, workflowId, completed, freezeRemoved, dropped: result.dropped ?? [] };
    } finally {
      clearTimeout(timer);
    }
  }

  /** `ferry cleanup` of a change plan: capture and shadows of its rewrite steps, then its bookkeeping. */
  private async cleanupChange(id: string, status: string, specInput: unknown, waitMs: number): Promise<CleanupOutcome> {
    if (status === 'RUNNING') throw new RefusedError(`change ${id} is still running; cancel it instead (its rollback removes what it made)`, FAILURE.StillRunning);
    let plan: ChangePlan;
    try {
      plan = parseChangePlan(specInput);
    } catch {
      throw new RefusedError(`change ${id} has no recorded plan`, FAILURE.UnknownMigration);
    }
    const rewrites = [];
    for (const step of plan.steps) {
      if (step.kind !== 'rewrite') continue;
      // While its retirement runs, the new table's capture is its (for ferry revert): left alone.
      const retiring = await this.handle(workflowIds.retire(id, step.index))
        .describe()
        .then((r) => r.status.name === 'RUNNING')
        .catch(() => false);
      rewrites.push({ step: step.index, table: step.table, revertCapture: !retiring });
    }
    const workflowId = `${workflowIds.cleanup(id)}-${randomBytes(3).toString('hex')}`;
    const handle = await this.client.workflow.start(CHANGE_CLEANUP_WORKFLOW, {
      taskQueue: this.config.taskQueue,
      workflowId,
      args: [{ changeId: id, database: plan.database, rewrites }],
      staticSummary: `Ferry cleanup of change plan ${id}: removes what its rewrites left on ${plan.database}`,
    });
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), waitMs)));
    try {
      const result = await Promise.race([handle.result() as Promise<{ dropped: string[]; pending: string[] }>, waited]);
      if (!result) return { done: false, workflowId };
      return { done: true, workflowId, change: true, dropped: result.dropped, pending: result.pending };
    } finally {
      clearTimeout(timer);
    }
  }
}

function afterwardsOf(specInput: unknown): string | undefined {
  try {
    return parseSpec(specInput).cutover?.afterwards;
  } catch {
    return undefined;
  }
}

/** The start's audit as the workflows take it: absent when nobody said who or why. */
function startedBy(audit: Audit | undefined): { startedBy?: Audit } {
  const checked = checkedAudit(audit);
  return checked.actor || checked.reason ? { startedBy: checked } : {};
}

export { streamEvents };
export type { ReadOptions, StreamedEvent };
