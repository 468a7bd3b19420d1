/**
 * The two guarded state machines of docs/architecture.md §2: the migration (task) state and a
 * table's phase. A transition table plus one function that applies a move or
 * throws; nothing else assigns a state. Pure module: imported by workflows.
 */
import { IllegalTransitionError } from './errors';

export const MIGRATION_STATES = [
  'PENDING',
  'QUEUED',
  'RUNNING',
  'CANCELLING',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'TIMED_OUT',
] as const;
export type MigrationState = (typeof MIGRATION_STATES)[number];

export const PHASES = [
  'PENDING',
  'FULL_MIGRATING',
  'FULL_DONE',
  'INCR_SYNCING',
  'VALIDATING',
  'AWAITING_APPROVAL',
  'CUTTING_OVER',
  'COMPLETED',
  'ROLLING_BACK',
  'FAILED',
] as const;
export type Phase = (typeof PHASES)[number];

export const MIGRATION_TRANSITIONS: Record<MigrationState, readonly MigrationState[]> = {
  PENDING: ['QUEUED', 'CANCELLED'],
  QUEUED: ['RUNNING', 'CANCELLED'],
  RUNNING: ['SUCCEEDED', 'FAILED', 'CANCELLING', 'TIMED_OUT'],
  CANCELLING: ['CANCELLED', 'FAILED'],
  SUCCEEDED: [],
  FAILED: ['PENDING'], // `ferry retry`
  CANCELLED: [],
  TIMED_OUT: [],
};

const ABORT: readonly Phase[] = ['ROLLING_BACK', 'FAILED'];

export const PHASE_TRANSITIONS: Record<Phase, readonly Phase[]> = {
  PENDING: ['FULL_MIGRATING', ...ABORT],
  FULL_MIGRATING: ['FULL_DONE', ...ABORT],
  FULL_DONE: ['INCR_SYNCING', 'VALIDATING', 'COMPLETED', ...ABORT],
  INCR_SYNCING: ['VALIDATING', 'AWAITING_APPROVAL', ...ABORT],
  // Online validation may send a table back to syncing to re-check its dirty keys.
  VALIDATING: ['COMPLETED', 'INCR_SYNCING', 'AWAITING_APPROVAL', ...ABORT],
  AWAITING_APPROVAL: ['CUTTING_OVER', ...ABORT],
  CUTTING_OVER: ['COMPLETED', ...ABORT],
  COMPLETED: [],
  ROLLING_BACK: ['FAILED'],
  FAILED: [],
};

export interface Transition<S extends string> {
  from: S;
  to: S;
  at: string;
  reason?: string;
}

export { IllegalTransitionError };

/** A state with the record of every move applied to it. */
export class StateMachine<S extends string> {
  readonly transitions: Transition<S>[] = [];

  constructor(
    readonly machine: string,
    private readonly table: Record<S, readonly S[]>,
    private current: S,
    history: Transition<S>[] = [],
  ) {
    this.transitions.push(...history);
  }

  get state(): S {
    return this.current;
  }

  can(to: S): boolean {
    return this.table[this.current].includes(to);
  }

  isTerminal(): boolean {
    return this.table[this.current].length === 0;
  }

  /** Applies a legal move and records it; throws IllegalTransitionError otherwise. */
  to(to: S, at: string, reason?: string): Transition<S> {
    if (!this.can(to)) throw new IllegalTransitionError(this.machine, this.current, to);
    const t: Transition<S> = reason === undefined ? { from: this.current, to, at } : { from: this.current, to, at, reason };
    this.current = to;
    this.transitions.push(t);
    return t;
  }
}

export function migrationStateMachine(initial: MigrationState = 'PENDING', history?: Transition<MigrationState>[]) {
  return new StateMachine<MigrationState>('migration', MIGRATION_TRANSITIONS, initial, history);
}

export function phaseMachine(initial: Phase = 'PENDING', history?: Transition<Phase>[]) {
  return new StateMachine<Phase>('phase', PHASE_TRANSITIONS, initial, history);
}

export function isTerminalState(state: string): boolean {
  return state === 'SUCCEEDED' || state === 'FAILED' || state === 'CANCELLED' || state === 'TIMED_OUT';
}
