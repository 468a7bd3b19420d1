/**
 * FerryClient: the facade other services import (pg-boss style: one public class). It speaks
 * only Temporal — the databases are reached by the workers — so it needs no connection URLs.
 */
import { randomBytes } from 'node:crypto';
import {
  Client,
  Connection,
  WorkflowExecutionDescription,
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowHandle,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { TypedSearchAttributes, WorkflowIdConflictPolicy } from '@temporalio/common';
import { decodeFromPayloadsAtIndex, decodeOptionalFailureToOptionalError } from '@temporalio/common/lib/internal-non-workflow';
import { dataConverterFromEnv } from './codec';
import { RefusedError } from './core/errors';
import { innermostApplicationFailure } from './core/failures';
import type { CleanupInput, CleanupResult } from '../workflows/cleanup';
import type { ChangePreflightResult } from '../activities/change-preflight';
import { approveCutoverSignal, cancelSignal, changeStateQuery, pauseSignal, resumeSignal, stateQuery, tableStateQuery, throttleSignal, ThrottleRequest } from '../workflows/definitions';
import { ChangePlan, isChangePlanInput, parseChangePlan } from './core/change-plan';
import { ChangeResultDocument, ChangeStatusDocument, StepProgress } from './core/change-status';
import { connectionOptions, TemporalConfig, temporalConfig } from './config';
import { CHANGE_PREFLIGHT_WORKFLOW, CHANGE_WORKFLOW, CLEANUP_WORKFLOW, FerryPhaseKey, FerrySourceKey, FerryStateKey, FerryTargetKey, HELPER_WORKFLOW_TYPES, MIGRATION_WORKFLOW, PREFLIGHT_WORKFLOW, UNFREEZE_WORKFLOW, workflowIds } from './core/names';
import { MigrationPlan } from './core/plan';
import { checkThrottle, parseSpec, Spec } from './core/spec';
import { MigrationState, Phase } from './core/state-machine';
import { temporal } from '@temporalio/proto';
import { Audit, CaptureStatus, checkedAudit, ResultDocument, StatusDocument } from './core/status';
import { FAILURE } from './core/failure-types';

export interface StartOptions {
  /** Overrides spec.id. */
  id?: string;
  /** Skip the preflight helper (the workflow runs its own preflight anyway). */
  skipPreflight?: boolean;
  /** Table workflows continue as new after this many history events (default 10,000). */
  tableHistoryLimit?: number;
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

export interface MigrationSummary {
  id: string;
  state: MigrationState | string;
  phase: Phase | string;
  startedAt: string;
  endedAt?: string;
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
  /** What was dropped on the target. */
  dropped?: string[];
}

export function generateMigrationId(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `ferry-${stamp}-${randomBytes(3).toString('hex')}`;
}

export class FerryClient {
  private constructor(
    readonly client: Client,
    readonly config: TemporalConfig,
    private readonly ownsConnection: Connection | undefined,
  ) {}

  static async connect(config: Partial<TemporalConfig> = {}, env: NodeJS.ProcessEnv = process.env): Promise<FerryClient> {
    const full = { ...temporalConfig(env), ...config };
    // FERRY_CODEC_KEY: the workers' payload codec, or this client could not read what they wrote.
    const dataConverter = dataConverterFromEnv(env);
    const connection = await Connection.connect(connectionOptions(full));
    return new FerryClient(new Client({ connection, namespace: full.namespace, dataConverter }), full, connection);
  }

  /** Wraps an existing Temporal client (tests, services that already hold one). */
  static fromClient(client: Client, config: Partial<TemporalConfig> = {}): FerryClient {
    return new FerryClient(client, { ...temporalConfig(), ...config, namespace: client.options.namespace }, undefined);
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
    try {
      return (await this.client.workflow.execute(workflowType, {
        taskQueue: this.config.taskQueue,
        workflowId: `${id}.preflight.${randomBytes(4).toString('hex')}`,
        args: [input, id],
        workflowExecutionTimeout: '10 minutes',
      })) as T;
    } catch (err) {
      const failure = innermostApplicationFailure(err);
      if (failure) throw new RefusedError(failure.message, failure.type ?? FAILURE.Refused, { cause: err });
      throw err;
    }
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
    const id = spec.id ?? generateMigrationId();
    const running = await this.runningExecution(id);
    if (running) return { id, runId: running, started: false };
    const plan = options.skipPreflight ? undefined : await this.preflight(specInput, id);
    const input = { ...(specInput as Record<string, unknown>), id };
    try {
      const handle = await this.client.workflow.start(MIGRATION_WORKFLOW, {
        ...this.startOptions(id, spec, input),
        args: [input, { plan, tableHistoryLimit: options.tableHistoryLimit }],
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
      });
      return { id, runId: handle.firstExecutionRunId, plan, started: true };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        throw new RefusedError(`migration ${id} already exists and has ended; choose another id (or \`ferry retry ${id}\` if it failed)`, 'IdInUse', {
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
      throw new RefusedError(`migration ${id} is ${d.status.name === 'RUNNING' ? 'still running' : state}; only a FAILED migration can be retried`, 'NotFailed');
    }
    const input = d.memo?.spec;
    if (!input) throw new RefusedError(`migration ${id} did not record its spec; start it again with ferry start`, 'NoSpec');
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
      staticSummary: `Ferry ${spec.mode} migration ${spec.source} → ${spec.target}: ${spec.tables.length} table(s)`,
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

  /**
   * The status document: the workflow's `state` query when a worker answers, else what
   * visibility knows (memo, search attributes). Two states are derived here, not stored:
   * QUEUED — no worker has run the workflow yet — and RETRYING — an activity of the migration
   * or of its tables is past its first attempt (its last error is attached).
   */
  async status(id: string): Promise<StatusDocument> {
    const handle = this.handle(id);
    const d = await handle.describe();
    const running = d.status.name === 'RUNNING';
    if (running && !(await this.hasRunAWorkflowTask(d.workflowId, d.runId))) return this.fromVisibility(d, 'QUEUED');
    let doc: StatusDocument;
    try {
      doc = await this.client.connection.withDeadline(Date.now() + 5_000, () => handle.query(stateQuery));
    } catch {
      doc = this.fromVisibility(d);
    }
    if (running) await this.withLiveProgress(id, doc);
    if (running) await this.withCaptureLag(d, doc);
    if (running && doc.state === 'RUNNING') {
      const open = doc.tables.map((t, i) => ({ t, i })).filter(({ t }) => !['COMPLETED', 'FAILED'].includes(t.phase)).map(({ i }) => i);
      const retrying = await this.retryingActivity(id, open);
      if (retrying) {
        doc.state = 'RETRYING';
        doc.retrying = retrying;
      }
    }
    return doc;
  }

  /**
   * Rows, chunks and lag of the unfinished tables, read from their workflows (tableState): the
   * parent hears of milestones only, so its own history does not grow while a table copies or
   * syncs for hours. A table whose workflow does not answer keeps what the parent knows.
   */
  private async withLiveProgress(id: string, doc: StatusDocument): Promise<void> {
    const open = doc.tables.map((t, i) => ({ t, i })).filter(({ t }) => !['PENDING', 'COMPLETED', 'FAILED'].includes(t.phase));
    for (let at = 0; at < open.length; at += 16) {
      await Promise.all(
        open.slice(at, at + 16).map(async ({ t, i }) => {
          const live = await this.client.connection
            .withDeadline(Date.now() + 3_000, () => this.handle(workflowIds.table(id, i)).query(tableStateQuery))
            .catch(() => undefined);
          if (!live) return;
          t.rowsCopied = live.rowsCopied;
          t.chunks = live.chunks;
          if (live.lag) t.lag = live.lag;
        }),
      );
    }
  }

  /** Logical capture's slot lag, as its consumer last reported it in a heartbeat. */
  private async withCaptureLag(d: WorkflowExecutionDescription, doc: StatusDocument): Promise<void> {
    const consumer = (d.raw.pendingActivities ?? []).find((a) => a.activityType?.name === 'streamChanges');
    const payloads = consumer?.heartbeatDetails?.payloads;
    if (!payloads?.length) return;
    const details = await decodeHeartbeat(this, payloads);
    const lag = details?.lag as Omit<CaptureStatus, 'mode' | 'confirmedLsn'> | undefined;
    if (!lag) return;
    doc.capture = { mode: 'logical', confirmedLsn: (details?.confirmedLsn as string | null) ?? null, ...lag };
  }

  private async hasRunAWorkflowTask(workflowId: string, runId: string): Promise<boolean> {
    const page = await this.client.workflowService.getWorkflowExecutionHistory({
      namespace: this.client.options.namespace,
      execution: { workflowId, runId },
      maximumPageSize: 10,
    });
    return (page.history?.events ?? []).some((e) => e.workflowTaskCompletedEventAttributes);
  }

  /** The first activity past its first attempt, in the migration or one of its unfinished tables. */
  private async retryingActivity(id: string, tableIndexes: number[]): Promise<StatusDocument['retrying']> {
    const ids = [id, ...tableIndexes.map((i) => workflowIds.table(id, i))];
    // Described in parallel, a few at a time: a status read stays a handful of round trips.
    for (let at = 0; at < ids.length; at += 16) {
      const batch = await Promise.all(
        ids.slice(at, at + 16).map(async (workflowId) => {
          const d = await this.handle(workflowId).describe().catch(() => undefined);
          if (d?.status.name !== 'RUNNING') return undefined;
          const pending = (d.raw.pendingActivities ?? []).find(isRetrying);
          if (!pending) return undefined;
          // Decoded like any failure: with FERRY_CODEC_KEY its message is an encrypted payload.
          const lastFailure = await decodeOptionalFailureToOptionalError(this.client.workflow.options.loadedDataConverter, pending.lastFailure);
          return {
            workflowId,
            activity: pending.activityType?.name ?? 'activity',
            attempt: pending.attempt ?? 2,
            lastError: lastFailure?.message,
          };
        }),
      );
      const first = batch.find(Boolean);
      if (first) return first;
    }
    return undefined;
  }

  private fromVisibility(d: WorkflowExecutionDescription, derived?: 'QUEUED'): StatusDocument {
    const result = d.memo?.result as ResultDocument | undefined;
    const doc: StatusDocument = {
      id: d.workflowId,
      runId: d.runId,
      state: derived ?? ((result?.state ?? d.typedSearchAttributes.get(FerryStateKey) ?? 'QUEUED') as MigrationState),
      phase: (result?.phase ?? d.typedSearchAttributes.get(FerryPhaseKey) ?? 'PENDING') as Phase,
      paused: false,
      tables: result?.tables ?? [],
      events: result?.events ?? [],
      transitions: [],
      startedAt: d.startTime.toISOString(),
    };
    if (result?.error) doc.error = result.error;
    if (d.closeTime) doc.endedAt = d.closeTime.toISOString();
    return doc;
  }

  /** Waits for the migration to end and returns its result document, for every outcome. */
  async result(id: string): Promise<ResultDocument> {
    const handle = this.handle(id);
    try {
      return await handle.result();
    } catch (err) {
      if (!(err instanceof WorkflowFailedError)) throw err;
      const d = await handle.describe();
      const fromMemo = d.memo?.result as ResultDocument | undefined;
      if (fromMemo) return fromMemo;
      const failure = innermostApplicationFailure(err);
      const end = (d.closeTime ?? new Date()).toISOString();
      return {
        task_id: id,
        state: d.status.name === 'CANCELLED' ? 'CANCELLED' : d.status.name === 'TIMED_OUT' ? 'TIMED_OUT' : 'FAILED',
        phase: 'FAILED',
        start_time: d.startTime.toISOString(),
        end_time: end,
        duration: '',
        duration_ms: Date.parse(end) - d.startTime.getTime(),
        error: { message: failure?.message ?? err.message, type: failure?.type ?? undefined },
        metadata: null,
        tables: [],
        events: [],
        rows_copied: 0,
        warnings: [],
      };
    }
  }

  /** Migrations (not helper workflows), newest first, optionally by FerryState. */
  async list(filter: { state?: string; limit?: number } = {}): Promise<MigrationSummary[]> {
    let query = `WorkflowType IN ('${MIGRATION_WORKFLOW}', '${CHANGE_WORKFLOW}')`;
    if (filter.state) query += ` AND FerryState = '${filter.state.replace(/'/g, '')}'`;
    const out: MigrationSummary[] = [];
    for await (const w of this.client.workflow.list({ query })) {
      if (HELPER_WORKFLOW_TYPES.includes(w.type)) continue;
      const summary: MigrationSummary = {
        id: w.workflowId,
        state: w.typedSearchAttributes.get(FerryStateKey) ?? 'QUEUED',
        phase: w.typedSearchAttributes.get(FerryPhaseKey) ?? 'PENDING',
        startedAt: w.startTime.toISOString(),
      };
      if (w.closeTime) summary.endedAt = w.closeTime.toISOString();
      out.push(summary);
      if (out.length >= (filter.limit ?? 1000)) break;
    }
    return out;
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
  async startChange(planInput: unknown, options: { id?: string; skipPreflight?: boolean } = {}): Promise<StartedChange> {
    const input = options.id ? { ...(planInput as Record<string, unknown>), id: options.id } : planInput;
    const plan: ChangePlan = parseChangePlan(input);
    const id = plan.id ?? generateMigrationId().replace(/^ferry-/, 'change-');
    const running = await this.runningExecution(id);
    if (running) return { id, runId: running, started: false };
    const withId = { ...(input as Record<string, unknown>), id };
    const preflight = options.skipPreflight ? undefined : await this.preflightChange(withId, id);
    try {
      const handle = await this.client.workflow.start(CHANGE_WORKFLOW, {
        taskQueue: this.config.taskQueue,
        workflowId: id,
        args: [withId, { preflight }],
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
        throw new RefusedError(`change ${id} already exists and has ended; choose another id`, 'IdInUse', { cause: err });
      }
      throw err;
    }
  }

  /** 'change' for a changeWorkflow, 'migration' otherwise. */
  async kindOf(id: string): Promise<'change' | 'migration'> {
    const d = await this.handle(id).describe();
    return d.type === CHANGE_WORKFLOW ? 'change' : 'migration';
  }

  /**
   * A change plan's status document: the workflow's `state` query, with the running step's live
   * progress read from its activity's heartbeat (rows of a backfill's pass, an index build's
   * blocks or tuples), and RETRYING when an activity is past its first attempt.
   */
  async changeStatus(id: string): Promise<ChangeStatusDocument> {
    const handle = this.handle(id);
    const d = await handle.describe();
    let doc: ChangeStatusDocument;
    try {
      doc = await this.client.connection.withDeadline(Date.now() + 5_000, () => handle.query(changeStateQuery));
    } catch {
      const result = d.memo?.result as ChangeResultDocument | undefined;
      doc = {
        kind: 'change',
        id,
        runId: d.runId,
        database: String(d.memo?.database ?? ''),
        state: (result?.state ?? d.typedSearchAttributes.get(FerryStateKey) ?? 'QUEUED') as MigrationState,
        phase: (result?.phase ?? d.typedSearchAttributes.get(FerryPhaseKey) ?? 'PENDING') as ChangeStatusDocument['phase'],
        paused: false,
        throttle: {},
        steps: result?.steps ?? [],
        events: result?.events ?? [],
        transitions: [],
        startedAt: d.startTime.toISOString(),
      };
      if (result?.error) doc.error = result.error;
      if (d.closeTime) doc.endedAt = d.closeTime.toISOString();
    }
    if (d.status.name !== 'RUNNING') return doc;
    const running = doc.steps.find((s) => s.state === 'RUNNING');
    for (const a of d.raw.pendingActivities ?? []) {
      const name = a.activityType?.name;
      const payloads = a.heartbeatDetails?.payloads;
      if (running && payloads?.length && (name === 'backfillSlice' || name === 'buildChangeIndex' || name === 'copyRewrite')) {
        const details = await decodeHeartbeat(this, payloads);
        if (name === 'copyRewrite' && typeof details?.rows === 'number') {
          running.progress = { done: details.rows as number, total: Number(details.total ?? details.rows), unit: 'rows' };
        }
        if (name === 'buildChangeIndex' && details?.progress) running.progress = details.progress as StepProgress;
        if (name === 'backfillSlice' && typeof details?.rowsScanned === 'number' && running.progress) {
          running.progress = { ...running.progress, done: Math.max(running.progress.done, details.rowsScanned as number) };
        }
      }
      if ((a.attempt ?? 1) > 1 && doc.state === 'RUNNING') {
        const lastFailure = await decodeOptionalFailureToOptionalError(this.client.workflow.options.loadedDataConverter, a.lastFailure);
        doc.state = 'RETRYING';
        doc.retrying = { workflowId: id, activity: name ?? 'activity', attempt: a.attempt ?? 2, lastError: lastFailure?.message };
      }
    }
    return doc;
  }

  /** Waits for a change plan to end and returns its result document, for every outcome. */
  async changeResult(id: string): Promise<ChangeResultDocument> {
    const handle = this.handle(id);
    try {
      return await handle.result();
    } catch (err) {
      if (!(err instanceof WorkflowFailedError)) throw err;
      const d = await handle.describe();
      const fromMemo = d.memo?.result as ChangeResultDocument | undefined;
      if (fromMemo) return fromMemo;
      const failure = innermostApplicationFailure(err);
      const end = (d.closeTime ?? new Date()).toISOString();
      return {
        kind: 'change',
        task_id: id,
        state: d.status.name === 'CANCELLED' ? 'CANCELLED' : 'FAILED',
        phase: 'FAILED',
        database: String(d.memo?.database ?? ''),
        start_time: d.startTime.toISOString(),
        end_time: end,
        duration: '',
        duration_ms: Date.parse(end) - d.startTime.getTime(),
        error: { message: failure?.message ?? err.message, type: failure?.type ?? undefined },
        metadata: null,
        steps: [],
        events: [],
        rows_backfilled: 0,
        warnings: [],
      };
    }
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
    const checked = checkThrottle(request);
    if (!checked.ok) throw new RefusedError(checked.reason, 'InvalidThrottle');
    await this.handle(id).signal(throttleSignal, checked.value, checkedAudit(audit));
  }

  /**
   * Lifts the write freeze an online cutover left on the source (`cutover.afterwards:
   * keep-frozen`). Runs a short helper workflow on the workers, which hold the connections.
   */
  async unfreeze(id: string): Promise<{ unfrozen: string[]; pending?: string[] }> {
    const d = await this.handle(id).describe();
    const source = d.memo?.source;
    if (typeof source !== 'string') throw new RefusedError(`migration ${id} has no recorded source connection`, 'UnknownMigration');
    return this.client.workflow.execute(UNFREEZE_WORKFLOW, {
      taskQueue: this.config.taskQueue,
      workflowId: `${id}.unfreeze.${randomBytes(4).toString('hex')}`,
      args: [id, source],
      workflowExecutionTimeout: '10 minutes',
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
    if (d.status.name === 'RUNNING') {
      throw new RefusedError(`migration ${id} is still running; cancel it instead (its rollback removes what it made)`, 'StillRunning');
    }
    const { source, target, spec } = d.memo ?? {};
    if (typeof source !== 'string' || typeof target !== 'string') throw new RefusedError(`migration ${id} has no recorded connections`, 'UnknownMigration');
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
}

function afterwardsOf(specInput: unknown): string | undefined {
  try {
    return parseSpec(specInput).cutover?.afterwards;
  } catch {
    return undefined;
  }
}

/** A pending activity's last heartbeat details, decoded as the workers' data converter wrote them. */
type PendingActivity = NonNullable<WorkflowExecutionDescription['raw']['pendingActivities']>[number];

/**
 * Past its first attempt and not running well. Logical capture's consumer runs for minutes per
 * attempt: a later attempt that is running again (its worker was lost, say) is not retrying.
 */
function isRetrying(a: PendingActivity): boolean {
  if ((a.attempt ?? 1) <= 1) return false;
  return !(a.activityType?.name === 'streamChanges' && a.state === temporal.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_STARTED);
}

async function decodeHeartbeat(client: FerryClient, payloads: unknown[]): Promise<Record<string, unknown> | undefined> {
  try {
    const value = await decodeFromPayloadsAtIndex<unknown>(client.client.workflow.options.loadedDataConverter, 0, payloads as never);
    return value && typeof value === 'object' ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
