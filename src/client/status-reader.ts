/**
 * What Ferry tells about its migrations and change plans: status documents (the workflow's
 * `state` query, the tables' live progress, what visibility knows when no worker answers, the
 * derived QUEUED and RETRYING), result documents for every outcome, and the list. Reads only:
 * FerryClient (./index.ts) is the facade that also starts and signals.
 */
import { Client, isGrpcServiceError, WorkflowExecutionDescription, WorkflowFailedError, WorkflowHandle } from '@temporalio/client';
import { Payload, PayloadCodec } from '@temporalio/common';
import { decodeFromPayloadsAtIndex, decodeOptionalFailureToOptionalError } from '@temporalio/common/lib/internal-non-workflow';
import { LenientCodec, UNREADABLE } from '../codec';
import { innermostApplicationFailure } from '../core/failures';
import { changeStateQuery, RetireResult, retireStateQuery, RevertAttempt, stateQuery, tableStateQuery } from '../core/signals';
import { ChangeResultDocument, ChangeStatusDocument, StepProgress, StepStatus } from '../core/change-status';
import { CHANGE_WORKFLOW, FerryPhaseKey, FerrySourceKey, FerryStateKey, FerryTargetKey, HELPER_WORKFLOW_TYPES, MIGRATION_WORKFLOW, workflowIds } from '../core/names';
import { MigrationState, Phase } from '../core/state-machine';
import { temporal } from '@temporalio/proto';
import { Blocker, CaptureStatus, ControlTransition, currentResultNames, ErrorInfo, ResultDocument, StatusDocument } from '../core/status';

/** One row of `ferry list` (schema/ferry-result.schema.json, $defs/listEntry). */
export interface MigrationSummary {
  id: string;
  kind: 'migration' | 'change';
  state: MigrationState | string;
  phase: Phase | string;
  /** Connection names (a change plan's database on both). */
  source?: string;
  target?: string;
  startedAt: string;
  endedAt?: string;
  /** Rows copied (a change plan: backfilled), once it has ended. */
  rows?: number;
  error?: ErrorInfo;
  /** Why its memo could not be read (encrypted with a key this client does not hold). */
  unreadable?: string;
}

/**
 * How long a wait for a result rides out a Temporal service that answers UNAVAILABLE (a server
 * restarting, a dev server losing its shard under load) beyond the gRPC client's own retries,
 * which give up after about 20 s: whoever waits on a migration of hours expects the wait to
 * outlast a server's restart, and the migration carries on meanwhile (its workers reconnect).
 */
export const RESULT_UNAVAILABLE_BUDGET_MS = 120_000;
const RESULT_UNAVAILABLE_PAUSE_MS = 2_000;
/** gRPC's status code UNAVAILABLE. */
const GRPC_UNAVAILABLE = 14;

function unavailable(err: unknown): boolean {
  for (let e: unknown = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    if (isGrpcServiceError(e) && e.code === GRPC_UNAVAILABLE) return true;
  }
  return false;
}

/**
 * `handle.result()`, asked again while the service is unavailable, up to
 * RESULT_UNAVAILABLE_BUDGET_MS from the first failure of an outage. A call that had been
 * waiting longer than that before it failed begins a new outage.
 */
async function resultThroughOutages(handle: WorkflowHandle): Promise<object> {
  let outageSince: number | undefined;
  for (;;) {
    const asked = Date.now();
    try {
      return await handle.result();
    } catch (err) {
      if (!unavailable(err)) throw err;
      const now = Date.now();
      if (outageSince === undefined || now - asked > RESULT_UNAVAILABLE_BUDGET_MS) outageSince = now;
      if (now - outageSince > RESULT_UNAVAILABLE_BUDGET_MS) throw err;
      await new Promise((resolve) => setTimeout(resolve, RESULT_UNAVAILABLE_PAUSE_MS));
    }
  }
}

/** The fields a result document built from a failure has, migration or change plan. */
interface EndedCommon {
  task_id: string;
  phase: 'FAILED';
  start_time: string;
  end_time: string;
  duration: string;
  duration_ms: number;
  error: ErrorInfo;
  metadata: null;
  events: [];
  warnings: [];
}

export class StatusReader {
  constructor(private readonly client: Client) {}

  private handle(id: string): WorkflowHandle {
    return this.client.workflow.getHandle(id);
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
    // The tables whose workflows run now, as the parent's pending children: of thousands of
    // tables copied in groups (which have no workflow) a few, so a status read stays a few calls.
    const children = new Set((d.raw.pendingChildren ?? []).map((c) => c.workflowId));
    const live = doc.tables.map((_, i) => i).filter((i) => children.has(workflowIds.table(id, i)));
    if (running) await this.withLiveProgress(id, doc, live);
    if (running) await this.withCaptureLag(d, doc);
    if (running) await this.withCutoverBlockers(d, doc);
    if (running && doc.state === 'RUNNING') {
      const retrying = await this.retryingActivity(id, live);
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
  private async withLiveProgress(id: string, doc: StatusDocument, running: number[]): Promise<void> {
    const open = running.map((i) => ({ t: doc.tables[i], i })).filter(({ t }) => !['PENDING', 'COMPLETED', 'FAILED'].includes(t.phase));
    for (let at = 0; at < open.length; at += 16) {
      await Promise.all(
        open.slice(at, at + 16).map(async ({ t, i }) => {
          const live = await this.client.connection
            .withDeadline(Date.now() + 3_000, () => this.handle(workflowIds.table(id, i)).query(tableStateQuery))
            .catch(() => undefined);
          if (!live) return;
          // The table's own phase is never behind the parent's view of it (a small table in
          // full mode reports its milestones only as it ends).
          t.phase = live.phase;
          t.rowsCopied = live.rowsCopied;
          t.chunks = live.chunks;
          if (live.lag) t.lag = live.lag;
          if (live.chunks.some((c) => c.state === 'COPYING')) await this.withCopyHeartbeats(workflowIds.table(id, i), t);
        }),
      );
    }
  }

  /**
   * A table workflow hears of a chunk's rows when its slice ends (every several seconds); the
   * slice's heartbeats carry the chunk's committed rows as each batch commits (sent at most
   * every 2 s): the newer of the two.
   */
  private async withCopyHeartbeats(workflowId: string, t: StatusDocument['tables'][number]): Promise<void> {
    const d = await this.handle(workflowId).describe().catch(() => undefined);
    for (const a of d?.raw.pendingActivities ?? []) {
      if (a.activityType?.name !== 'copyChunk') continue;
      const details = await decodeHeartbeat(this.client, a.heartbeatDetails?.payloads ?? []);
      const chunk = typeof details?.chunk === 'number' ? t.chunks[details.chunk] : undefined;
      if (chunk && typeof details?.rowsCopied === 'number') chunk.rowsCopied = Math.max(chunk.rowsCopied, details.rowsCopied);
    }
    t.rowsCopied = Math.max(t.rowsCopied, t.chunks.reduce((n, c) => n + c.rowsCopied, 0));
  }

  /** Logical capture's slot lag, as its consumer last reported it in a heartbeat. */
  private async withCaptureLag(d: WorkflowExecutionDescription, doc: StatusDocument): Promise<void> {
    const consumer = (d.raw.pendingActivities ?? []).find((a) => a.activityType?.name === 'streamChanges');
    const payloads = consumer?.heartbeatDetails?.payloads;
    if (!payloads?.length) return;
    const details = await decodeHeartbeat(this.client, payloads);
    const lag = details?.lag as Omit<CaptureStatus, 'mode' | 'confirmedLsn'> | undefined;
    if (!lag) return;
    doc.capture = { mode: 'logical', confirmedLsn: (details?.confirmedLsn as string | null) ?? null, ...lag };
  }

  /**
   * The sessions the cutover waits for, as its wait last reported them in a heartbeat: the
   * workflow hears of them when a wait slice ends (seconds later, or never before
   * cutover.maxWait has passed), the operator should see them at once.
   */
  private async withCutoverBlockers(d: WorkflowExecutionDescription, doc: StatusDocument): Promise<void> {
    const wait = (d.raw.pendingActivities ?? []).find((a) => a.activityType?.name === 'awaitWriters');
    const payloads = wait?.heartbeatDetails?.payloads;
    if (!payloads?.length) return;
    const blockers = (await decodeHeartbeat(this.client, payloads))?.blockers;
    if (Array.isArray(blockers) && blockers.length > 0) doc.cutoverBlockers = blockers as Blocker[];
  }

  private async hasRunAWorkflowTask(workflowId: string, runId: string): Promise<boolean> {
    const page = await this.client.workflowService.getWorkflowExecutionHistory({
      namespace: this.client.options.namespace,
      execution: { workflowId, runId },
      maximumPageSize: 10,
    });
    return (page.history?.events ?? []).some((e) => e.workflowTaskCompletedEventAttributes);
  }

  /** The first activity past its first attempt, in the migration or one of its running table workflows. */
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
  result(id: string): Promise<ResultDocument> {
    return this.ended<ResultDocument>(id, (common, d) => ({
      ...common,
      state: d.status.name === 'CANCELLED' ? 'CANCELLED' : d.status.name === 'TIMED_OUT' ? 'TIMED_OUT' : 'FAILED',
      tables: [],
      rowsCopied: 0,
    }));
  }

  /**
   * A workflow's result document once it has ended: its result, else (it failed) the one its
   * memo kept, else one built from the failure — `common` with what only `kind` has.
   */
  private async ended<T>(id: string, kind: (common: EndedCommon, d: WorkflowExecutionDescription) => T): Promise<T> {
    const handle = this.handle(id);
    try {
      return currentResultNames(await resultThroughOutages(handle)) as T;
    } catch (err) {
      if (!(err instanceof WorkflowFailedError)) throw err;
      const d = await handle.describe();
      const fromMemo = d.memo?.result as Partial<ResultDocument & ChangeResultDocument> | undefined;
      if (fromMemo) return currentResultNames(fromMemo) as T;
      const failure = innermostApplicationFailure(err);
      const end = (d.closeTime ?? new Date()).toISOString();
      return kind(
        {
          task_id: id,
          phase: 'FAILED',
          start_time: d.startTime.toISOString(),
          end_time: end,
          duration: '',
          duration_ms: Date.parse(end) - d.startTime.getTime(),
          error: { message: failure?.message ?? err.message, type: failure?.type ?? undefined },
          metadata: null,
          events: [],
          warnings: [],
        },
        d,
      );
    }
  }

  /**
   * Migrations and change plans (not helper workflows), newest first, optionally by FerryState.
   * State, phase, source and target come from search attributes (never encrypted); rows and the
   * error from the memo's result, which a client without the key cannot open: such a row is
   * listed with `unreadable` instead of failing the whole listing.
   */
  async list(filter: { state?: string; limit?: number } = {}): Promise<MigrationSummary[]> {
    let query = `WorkflowType IN ('${MIGRATION_WORKFLOW}', '${CHANGE_WORKFLOW}')`;
    if (filter.state) query += ` AND FerryState = '${filter.state.toUpperCase().replace(/'/g, '')}'`;
    const codecs = this.client.workflow.options.loadedDataConverter.payloadCodecs;
    const lenient = new Client({
      connection: this.client.connection,
      namespace: this.client.options.namespace,
      dataConverter: { payloadCodecs: [new LenientCodec(codecs.length ? { encode: async (p) => p, decode: async (p) => decodeAll(codecs, p) } : undefined)] },
    });
    const out: MigrationSummary[] = [];
    for await (const w of lenient.workflow.list({ query })) {
      if (HELPER_WORKFLOW_TYPES.includes(w.type)) continue;
      const change = w.type === CHANGE_WORKFLOW;
      const summary: MigrationSummary = {
        id: w.workflowId,
        kind: change ? 'change' : 'migration',
        state: w.typedSearchAttributes.get(FerryStateKey) ?? 'QUEUED',
        phase: w.typedSearchAttributes.get(FerryPhaseKey) ?? 'PENDING',
        source: w.typedSearchAttributes.get(FerrySourceKey),
        target: w.typedSearchAttributes.get(FerryTargetKey),
        startedAt: w.startTime.toISOString(),
      };
      if (w.closeTime) summary.endedAt = w.closeTime.toISOString();
      const memo = (w.memo ?? {}) as Record<string, unknown>;
      const unreadable = Object.values(memo).find((v): v is Record<string, string> => typeof v === 'object' && v !== null && UNREADABLE in v);
      if (unreadable) summary.unreadable = unreadable[UNREADABLE];
      const result = memo.result && !unreadable ? currentResultNames(memo.result as Partial<ResultDocument & ChangeResultDocument>) : undefined;
      if (result) {
        const rows = change ? result.rowsBackfilled : result.rowsCopied;
        if (typeof rows === 'number') summary.rows = rows;
        if (result.error) summary.error = result.error;
      }
      out.push(summary);
      if (out.length >= (filter.limit ?? 1000)) break;
    }
    return out;
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
    doc.transitions.push(...(await this.revertControls(id, doc.steps)));
    if (d.status.name !== 'RUNNING') return doc;
    const running = doc.steps.find((s) => s.state === 'RUNNING');
    for (const a of d.raw.pendingActivities ?? []) {
      const name = a.activityType?.name;
      const payloads = a.heartbeatDetails?.payloads;
      if (running && payloads?.length && (name === 'backfillSlice' || name === 'buildChangeIndex' || name === 'copyRewrite')) {
        const details = await decodeHeartbeat(this.client, payloads);
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

  /**
   * `ferry revert` of the plan's swapped rewrite steps, as controls: a revert is a signal to the
   * step's retirement workflow (which outlives the plan), so the plan's own record has none.
   * Read from that workflow's state while it keeps the old table, from its result after.
   */
  private async revertControls(id: string, steps: StepStatus[]): Promise<ControlTransition[]> {
    const controls: ControlTransition[] = [];
    for (const step of steps.filter((s) => s.kind === 'rewrite' && s.state === 'SUCCEEDED')) {
      const handle = this.client.workflow.getHandle(workflowIds.retire(id, step.index));
      let reverts: RevertAttempt[] | undefined;
      let reverting = false;
      try {
        const d = await handle.describe();
        if (d.status.name === 'RUNNING') {
          const state = await this.client.connection.withDeadline(Date.now() + 5_000, () => handle.query(retireStateQuery));
          reverts = state.reverts;
          reverting = state.phase === 'REVERTING';
        } else if (d.status.name === 'COMPLETED') {
          reverts = ((await handle.result()) as RetireResult | undefined)?.reverts;
        }
      } catch {
        // No retirement (the step swapped in an execution begun before reverts existed), or no
        // worker to answer the query right now: the plan's status goes on without it.
        continue;
      }
      const asked = reverts ?? [];
      asked.forEach((r, i) => {
        const last = i === asked.length - 1;
        const to = r.error ? `swapped (the revert failed: ${r.error})` : last && reverting ? 'reverting' : 'reverted';
        const audit = { ...(r.actor ? { actor: r.actor } : {}), ...(r.reason ? { reason: r.reason } : {}) };
        controls.push({ machine: 'control', signal: 'revert', from: `step ${step.index + 1} swapped`, to, ...audit, at: r.requestedAt });
      });
    }
    return controls;
  }

  /** Waits for a change plan to end and returns its result document, for every outcome; reverts of its rewrite steps among its controls. */
  async changeResult(id: string): Promise<ChangeResultDocument> {
    const result = await this.endedChange(id);
    const reverts = await this.revertControls(id, result.steps);
    return reverts.length ? { ...result, controls: [...(result.controls ?? []), ...reverts] } : result;
  }

  private endedChange(id: string): Promise<ChangeResultDocument> {
    return this.ended<ChangeResultDocument>(id, (common, d) => ({
      ...common,
      kind: 'change',
      state: d.status.name === 'CANCELLED' ? 'CANCELLED' : 'FAILED',
      database: String(d.memo?.database ?? ''),
      steps: [],
      rowsBackfilled: 0,
    }));
  }
}

/** Runs payloads through codecs in decoding order (the last one applied on encode first). */
async function decodeAll(codecs: PayloadCodec[], payloads: Payload[]): Promise<Payload[]> {
  let out = payloads;
  for (const codec of [...codecs].reverse()) out = await codec.decode(out);
  return out;
}

type PendingActivity = NonNullable<WorkflowExecutionDescription['raw']['pendingActivities']>[number];

/**
 * Past its first attempt and not running well. Logical capture's consumer runs for minutes per
 * attempt: a later attempt that is running again (its worker was lost, say) is not retrying.
 */
function isRetrying(a: PendingActivity): boolean {
  if ((a.attempt ?? 1) <= 1) return false;
  return !(a.activityType?.name === 'streamChanges' && a.state === temporal.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_STARTED);
}

/** A pending activity's last heartbeat details, decoded as the workers' data converter wrote them. */
async function decodeHeartbeat(client: Client, payloads: unknown[]): Promise<Record<string, unknown> | undefined> {
  try {
    const value = await decodeFromPayloadsAtIndex<unknown>(client.workflow.options.loadedDataConverter, 0, payloads as never);
    return value && typeof value === 'object' ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
