/**
 * The status document (query `state`, `ferry status --json`) and the result document
 * (`ferry result --json`, the callback body) of docs/architecture.md §9. Pure module: built by workflows.
 */
import { formatDuration } from './duration';
import { MigrationState, Phase, Transition } from './state-machine';
import type { EventStreamWhere } from './event-subjects';

export const EVENT_TYPES = [
  'MigrationStarted',
  'SliceMigrated',
  'TableCopied',
  'IncrementalCaughtUp',
  'ValidationPassed',
  'ConsistencyBreach',
  'IndexesBuilt',
  /** objects: all — the source's other objects restored on the target once the tables are loaded. */
  'ObjectsRestored',
  'CutoverStarted',
  'CutoverBlocked',
  'CutoverCompleted',
  /** cutover.switch: the application's queries held (PgBouncer PAUSE) or the webhook's `paused` answered. */
  'SwitchPaused',
  /** cutover.switch: PgBouncer's entry points at the target (RELOAD), or the webhook's `switched` answered. */
  'SwitchRepointed',
  /** cutover.switch: the held queries run again — on the target, or on the source after a rollback (`on`). */
  'SwitchResumed',
  'CaptureLost',
  'RollbackStarted',
  'RolledBack',
  'MigrationFinished',
  /** A control (pause, resume, throttle, approve, cancel signals; the start) taken, with who sent it and why. */
  'ControlReceived',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Who sent a control signal and why: optional on every control signal (the CLI fills in the OS user). */
export interface Audit {
  actor?: string;
  reason?: string;
}

/** The controls on record: the signals, the start (`ferry start --actor --reason`) and a change's revert (`ferry revert`). */
export type ControlSignal = 'pause' | 'resume' | 'throttle' | 'approve' | 'cancel' | 'start' | 'revert';

/** A control signal as the status document records it, beside the state machines' transitions. */
export interface ControlTransition extends Audit {
  machine: 'control';
  signal: ControlSignal;
  /** The control's setting before and after: running/paused, a rate cap, waiting/approved. */
  from: string;
  to: string;
  at: string;
}

/** "pause by alice (nightly batch) at …: running → paused", for people. */
export function describeControl(c: ControlTransition): string {
  return `${c.signal}${c.actor ? ` by ${c.actor}` : ''}${c.reason ? ` (${c.reason})` : ''} at ${c.at}: ${c.from} → ${c.to}`;
}

/** A rate cap for people: "500 rows/s, 200 rows a batch", or "no cap". */
export function describeRate(c: { rowsPerSecond?: number; batchRows?: number }): string {
  const rate = c.rowsPerSecond ? `${c.rowsPerSecond} rows/s` : 'no cap';
  return c.batchRows ? `${rate}, ${c.batchRows} rows a batch` : rate;
}

/** The audit fields of a signal from any client: strings only, bounded; anything else dropped. */
export function checkedAudit(input: unknown): Audit {
  const out: Audit = {};
  if (input && typeof input === 'object') {
    for (const key of ['actor', 'reason'] as const) {
      const value = (input as Record<string, unknown>)[key];
      if (typeof value === 'string' && value.trim()) out[key] = value.trim().slice(0, 500);
    }
  }
  return out;
}

export interface MigrationEvent {
  seq: number;
  type: EventType;
  at: string;
  table?: string;
  detail?: Record<string, unknown>;
}

export interface ChunkStatus {
  state: 'PENDING' | 'COPYING' | 'DONE' | 'FAILED';
  rowsCopied: number;
  checkpoint: string[] | null;
}

export interface TableStatus {
  source: string;
  target: string;
  phase: Phase;
  rowsCopied: number;
  rowsEstimated: number;
  chunks: ChunkStatus[];
  /** Online mode: the change log's backlog, its age, and keys applied so far. */
  lag?: { pendingChanges: number; seconds: number; changesApplied: number };
}

/** Phases in which a table still applies captured changes: its lag reading means changes to come. */
const APPLYING_CHANGES: readonly Phase[] = ['INCR_SYNCING', 'VALIDATING', 'AWAITING_APPROVAL', 'CUTTING_OVER'];

/**
 * A table's lag as people should read it: only while the table applies changes and the migration
 * runs. A COMPLETED table keeps the last reading taken before the cutover's drain (which applied
 * the rest), and nothing reads the lag of a migration that ended: shown, either reads as changes
 * never applied.
 */
export function liveLag(s: Pick<StatusDocument, 'endedAt'>, t: TableStatus): TableStatus['lag'] {
  return !s.endedAt && APPLYING_CHANGES.includes(t.phase) ? t.lag : undefined;
}

export interface ErrorInfo {
  message: string;
  type?: string;
  cause?: string;
}

/**
 * Where a migration's time went, step by step (the result shows the fixed costs — preflight,
 * DDL, the foreign keys — next to the copy). Steps follow each other; a table's copy,
 * validation and indexes overlap with other tables' and are one step, `tables`.
 */
export interface TimelineStep {
  step: 'preflight' | 'prepare' | 'tables' | 'foreign keys' | 'objects' | 'approval' | 'cutover' | 'afterwards' | 'finish';
  startedAt: string;
  endedAt?: string;
  ms?: number;
}

/** A session whose open write transaction the cutover waits for. */
export interface Blocker {
  /** 0 for a prepared transaction (it has no session). */
  pid: number;
  applicationName: string;
  user: string;
  xactAgeSeconds: number;
  /** The first 100 characters of its current or last query. */
  query: string;
  state: string;
}

/** Online mode: how the cutover went. */
export interface CutoverReport {
  frozenAt: string;
  /** From the freeze until the target was authoritative (or the source unfrozen). */
  writeOutageMs: number;
  dirtyRowsChecked: number;
  afterwards: 'keep-frozen' | 'unfreeze';
  /** cutover.switch: who moved the application's connections. */
  switch?: 'pgbouncer' | 'webhook';
  /** cutover.switch: the application's outage, from the pause (PgBouncer's PAUSE, the webhook's `paused`) to the resume on the target. */
  clientPauseMs?: number;
}

export interface StatusDocument {
  id: string;
  runId: string;
  /** RETRYING is derived when status is read (an activity past its first attempt). */
  state: MigrationState | 'RETRYING';
  phase: Phase;
  paused: boolean;
  tables: TableStatus[];
  events: MigrationEvent[];
  transitions: ((Transition<MigrationState> & { machine: 'state' }) | (Transition<Phase> & { machine: 'phase' }) | ControlTransition)[];
  error?: ErrorInfo;
  startedAt: string;
  endedAt?: string;
  /** Events dropped from the front of `events` to keep history small. */
  eventsDropped?: number;
  warnings?: string[];
  cutover?: CutoverReport;
  /** While the cutover waits for write transactions begun before the freeze: who they are. */
  cutoverBlockers?: Blocker[];
  timeline?: TimelineStep[];
  /** With state RETRYING: the activity being retried and its last error. */
  retrying?: { workflowId: string; activity: string; attempt: number; lastError?: string };
  /** Online with logical capture, while its consumer runs: the slot's lag, from the consumer's last heartbeat. */
  capture?: CaptureStatus;
  /** Where the events also go: the NATS JetStream stream and this run's subjects (workers with FERRY_NATS_URL). */
  eventStream?: EventStreamWhere;
  /** Each server's `server_version_num`, once preflight has read them. */
  source?: { serverVersion: number };
  target?: { serverVersion: number };
}

export interface CaptureStatus {
  mode: 'logical';
  /** Up to here every change is in the change logs. */
  confirmedLsn: string | null;
  /** WAL the slot holds on the source. */
  slotLagBytes: number;
  /** How long a change takes from its commit to the change logs (a heartbeat's round trip through the slot). */
  slotLagSeconds: number;
  /** WAL the slot may still hold before max_slot_wal_keep_size invalidates it; null when unlimited. */
  safeWalBytes: number | null;
}

/**
 * The result document and callback body (the callback contract of docs/architecture.md §9 plus
 * Ferry's fields). Naming: the contract's fields keep their snake_case names (task_id,
 * start_time, end_time, duration_ms); every field Ferry adds is camelCase, like the status
 * document's (schema/ferry-result.schema.json).
 */
export interface ResultDocument {
  task_id: string;
  state: MigrationState;
  phase: Phase;
  start_time: string;
  end_time: string;
  duration: string;
  duration_ms: number;
  error: ErrorInfo | null;
  metadata: Record<string, unknown> | null;
  tables: TableStatus[];
  /**
   * A migration of more than RESULT_TABLES_LISTED tables: the tables `tables` leaves out, by
   * phase (COMPLETED ones first, then the rest past the limit). Absent when every table is listed.
   */
  tablesOmitted?: { count: number; byPhase: Partial<Record<Phase, number>> };
  events: MigrationEvent[];
  rowsCopied: number;
  warnings: string[];
  /** Online mode: the freeze and its write outage. */
  cutover?: CutoverReport;
  callback?: { delivered: boolean; error?: string };
  timeline?: TimelineStep[];
  /** The control signals taken, with who sent them and why. */
  controls?: ControlTransition[];
}

/**
 * A result document as this Ferry names its fields: one written by an older Ferry (kept in a
 * finished workflow's result or memo) said `rows_copied`.
 */
export function currentResultNames<T extends object>(doc: T): T {
  const old = doc as Record<string, unknown>;
  const renames: [string, string][] = [
    ['rows_copied', 'rowsCopied'],
    ['rows_backfilled', 'rowsBackfilled'],
  ];
  if (!renames.some(([from]) => from in old)) return doc;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(old)) {
    const to = renames.find(([from]) => from === k)?.[1];
    if (to === undefined) out[k] = v;
    else if (!(to in old)) out[to] = v;
  }
  return out as T;
}

/**
 * Tables a result lists at most: past them it lists those that did not complete (tablesOmitted
 * counts the rest), so that a migration of thousands of tables still ends with a result Temporal
 * carries (2 MB a payload; 10,000 tables take about 1.7 MB listed) and a callback body a receiver
 * takes. The status document (`ferry status`) lists every table.
 */
export const RESULT_TABLES_LISTED = 1000;

/** The tables a result lists, and what it leaves out (resultDocument). */
function listedTables(tables: TableStatus[]): Pick<ResultDocument, 'tables' | 'tablesOmitted'> {
  if (tables.length <= RESULT_TABLES_LISTED) return { tables };
  const listed = tables.filter((t) => t.phase !== 'COMPLETED').slice(0, RESULT_TABLES_LISTED);
  const shown = new Set(listed);
  const byPhase: Partial<Record<Phase, number>> = {};
  for (const t of tables) if (!shown.has(t)) byPhase[t.phase] = (byPhase[t.phase] ?? 0) + 1;
  return { tables: listed, tablesOmitted: { count: tables.length - listed.length, byPhase } };
}

export function resultDocument(status: StatusDocument, metadata: Record<string, unknown> | undefined): ResultDocument {
  const end = status.endedAt ?? status.startedAt;
  const ms = Math.max(0, Date.parse(end) - Date.parse(status.startedAt));
  const doc: ResultDocument = {
    task_id: status.id,
    state: status.state === 'RETRYING' ? 'RUNNING' : status.state,
    phase: status.phase,
    start_time: status.startedAt,
    end_time: end,
    duration: formatDuration(ms),
    duration_ms: ms,
    error: status.error ?? null,
    metadata: metadata ?? null,
    ...listedTables(status.tables),
    events: status.events,
    rowsCopied: status.tables.reduce((n, t) => n + t.rowsCopied, 0),
    warnings: status.warnings ?? [],
  };
  if (status.cutover) doc.cutover = status.cutover;
  if (status.timeline) doc.timeline = status.timeline;
  const controls = status.transitions.filter((t): t is ControlTransition => t.machine === 'control');
  if (controls.length) doc.controls = controls;
  return doc;
}
