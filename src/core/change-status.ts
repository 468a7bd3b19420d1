/**
 * A change plan's states and documents (docs/architecture.md §10): the step state machine, the
 * plan's phase machine, the status document (query `state`) and the result document (also the
 * callback body). Pure module: workflows build these.
 */
import type { EventStreamWhere } from './event-subjects';
import { formatDuration } from './duration';
import { StepKind } from './change-plan';
import { ControlTransition, ErrorInfo } from './status';
import { MigrationState, StateMachine, Transition } from './state-machine';

export const STEP_STATES = ['PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'SKIPPED', 'ROLLED_BACK'] as const;
export type StepState = (typeof STEP_STATES)[number];

/**
 * A step runs once, or again after a failure (onFailure: pause, then `ferry resume`); a step
 * that succeeded may be undone by a rollback; steps never reached are skipped.
 */
export const STEP_TRANSITIONS: Record<StepState, readonly StepState[]> = {
  PENDING: ['RUNNING', 'SKIPPED'],
  RUNNING: ['SUCCEEDED', 'FAILED'],
  SUCCEEDED: ['ROLLED_BACK'],
  FAILED: ['RUNNING', 'ROLLED_BACK'],
  SKIPPED: [],
  ROLLED_BACK: [],
};

export const CHANGE_PHASES = ['PENDING', 'APPLYING', 'AWAITING_RESUME', 'ROLLING_BACK', 'COMPLETED', 'FAILED'] as const;
export type ChangePhase = (typeof CHANGE_PHASES)[number];

export const CHANGE_PHASE_TRANSITIONS: Record<ChangePhase, readonly ChangePhase[]> = {
  PENDING: ['APPLYING', 'FAILED'],
  APPLYING: ['AWAITING_RESUME', 'ROLLING_BACK', 'COMPLETED', 'FAILED'],
  // A paused failure: `ferry resume` retries the step; cancel rolls back or fails as the step says.
  AWAITING_RESUME: ['APPLYING', 'ROLLING_BACK', 'FAILED'],
  ROLLING_BACK: ['FAILED'],
  COMPLETED: [],
  FAILED: [],
};

export function stepMachine(initial: StepState = 'PENDING', history?: Transition<StepState>[]): StateMachine<StepState> {
  return new StateMachine<StepState>('step', STEP_TRANSITIONS, initial, history);
}

export function changePhaseMachine(initial: ChangePhase = 'PENDING', history?: Transition<ChangePhase>[]): StateMachine<ChangePhase> {
  return new StateMachine<ChangePhase>('change phase', CHANGE_PHASE_TRANSITIONS, initial, history);
}

export const CHANGE_EVENT_TYPES = [
  'ChangeStarted',
  'StepStarted',
  'StepCompleted',
  'StepFailed',
  'BackfillProgress',
  'RewriteSwapped',
  'StepRolledBack',
  'RollbackStarted',
  'RolledBack',
  'ControlReceived',
  'ChangeFinished',
] as const;
export type ChangeEventType = (typeof CHANGE_EVENT_TYPES)[number];

export interface ChangeEvent {
  seq: number;
  type: ChangeEventType;
  at: string;
  step?: number;
  detail?: Record<string, unknown>;
}

export interface StepProgress {
  done: number;
  total: number;
  /** rows (backfill), blocks or tuples (an index build's current phase). */
  unit: string;
  /** An index build's phase as pg_stat_progress_create_index names it. */
  phase?: string;
}

export interface StepStatus {
  index: number;
  kind: StepKind;
  /** What the step does, in a line (`index orders_note_idx on shop.orders`). */
  label: string;
  state: StepState;
  startedAt?: string;
  endedAt?: string;
  progress?: StepProgress;
  error?: ErrorInfo;
  /** A backfill's rows updated, all passes. */
  rowsUpdated?: number;
  /** How many attempts a lock-bound statement took; the passes a backfill made. */
  attempts?: number;
  passes?: number;
  /** What preflight decided: the safe form it runs instead of the statement as written. */
  note?: string;
}

export type ChangeTransition =
  | (Transition<MigrationState> & { machine: 'state' })
  | (Transition<ChangePhase> & { machine: 'phase' })
  | (Transition<StepState> & { machine: 'step'; step: number })
  | ControlTransition;

export interface ChangeStatusDocument {
  /** Where the events also go: the NATS JetStream stream and this run's subjects. */
  eventStream?: EventStreamWhere;
  kind: 'change';
  id: string;
  runId: string;
  database: string;
  state: MigrationState | 'RETRYING';
  phase: ChangePhase;
  paused: boolean;
  /** Why backfills are waiting right now (paused, replica lag, active sessions), if they are. */
  waiting?: string;
  throttle: { rowsPerSecond?: number; batchRows?: number };
  steps: StepStatus[];
  events: ChangeEvent[];
  transitions: ChangeTransition[];
  error?: ErrorInfo;
  warnings?: string[];
  startedAt: string;
  endedAt?: string;
  eventsDropped?: number;
  retrying?: { workflowId: string; activity: string; attempt: number; lastError?: string };
}

export interface ChangeResultDocument {
  kind: 'change';
  task_id: string;
  state: MigrationState;
  phase: ChangePhase;
  database: string;
  start_time: string;
  end_time: string;
  duration: string;
  duration_ms: number;
  error: ErrorInfo | null;
  metadata: Record<string, unknown> | null;
  steps: StepStatus[];
  events: ChangeEvent[];
  rowsBackfilled: number;
  warnings: string[];
  /** The controls taken (pause, resume, throttle, approve, cancel; the start; `ferry revert` of a rewrite step), with who sent them and why. */
  controls?: ControlTransition[];
  callback?: { delivered: boolean; error?: string };
}

export function changeResultDocument(status: ChangeStatusDocument, metadata: Record<string, unknown> | undefined): ChangeResultDocument {
  const end = status.endedAt ?? status.startedAt;
  const ms = Math.max(0, Date.parse(end) - Date.parse(status.startedAt));
  return {
    kind: 'change',
    task_id: status.id,
    state: status.state === 'RETRYING' ? 'RUNNING' : status.state,
    phase: status.phase,
    database: status.database,
    start_time: status.startedAt,
    end_time: end,
    duration: formatDuration(ms),
    duration_ms: ms,
    error: status.error ?? null,
    metadata: metadata ?? null,
    steps: status.steps,
    events: status.events,
    rowsBackfilled: status.steps.reduce((n, s) => n + (s.rowsUpdated ?? 0), 0),
    warnings: status.warnings ?? [],
    controls: status.transitions.filter((t): t is ControlTransition => t.machine === 'control'),
  };
}
