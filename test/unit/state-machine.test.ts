/**
 * The two state machines against the transition tables of docs/architecture.md §2, written out
 * here as the document states them — not imported from src/state-machine.ts — so a move the code
 * adds, drops or redirects without the document fails this test.
 */
import { IllegalTransitionError, MIGRATION_STATES, migrationStateMachine, phaseMachine, PHASES } from '../../src/core/state-machine';

/** docs/architecture.md §2, "migration state | may move to". */
const DOCUMENTED_STATES: Record<string, string[]> = {
  PENDING: ['QUEUED', 'CANCELLED'],
  QUEUED: ['RUNNING', 'CANCELLED'],
  RUNNING: ['SUCCEEDED', 'FAILED', 'CANCELLING', 'TIMED_OUT'],
  CANCELLING: ['CANCELLED', 'FAILED'],
  FAILED: ['PENDING'],
  SUCCEEDED: [],
  CANCELLED: [],
  TIMED_OUT: [],
};

/** docs/architecture.md §2, "phase | may move to". */
const DOCUMENTED_PHASES: Record<string, string[]> = {
  PENDING: ['FULL_MIGRATING', 'ROLLING_BACK', 'FAILED'],
  FULL_MIGRATING: ['FULL_DONE', 'ROLLING_BACK', 'FAILED'],
  FULL_DONE: ['VALIDATING', 'INCR_SYNCING', 'COMPLETED', 'ROLLING_BACK', 'FAILED'],
  INCR_SYNCING: ['VALIDATING', 'AWAITING_APPROVAL', 'ROLLING_BACK', 'FAILED'],
  VALIDATING: ['COMPLETED', 'INCR_SYNCING', 'AWAITING_APPROVAL', 'ROLLING_BACK', 'FAILED'],
  AWAITING_APPROVAL: ['CUTTING_OVER', 'ROLLING_BACK', 'FAILED'],
  CUTTING_OVER: ['COMPLETED', 'ROLLING_BACK', 'FAILED'],
  ROLLING_BACK: ['FAILED'],
  COMPLETED: [],
  FAILED: [],
};

const pairsOf = (states: string[]) => states.flatMap((from) => states.map((to) => [from, to] as const));

describe('the migration state machine', () => {
  it('has exactly the documented states', () => {
    expect([...MIGRATION_STATES].sort()).toEqual(Object.keys(DOCUMENTED_STATES).sort());
  });

  it.each(pairsOf(Object.keys(DOCUMENTED_STATES)))('from %s to %s is allowed exactly when the document says so', (from, to) => {
    const machine = migrationStateMachine(from as (typeof MIGRATION_STATES)[number]);
    if (DOCUMENTED_STATES[from].includes(to)) {
      const t = machine.to(to as (typeof MIGRATION_STATES)[number], '2026-01-01T00:00:00.000Z', 'because');
      expect(t).toEqual({ from, to, at: '2026-01-01T00:00:00.000Z', reason: 'because' });
      expect(machine.state).toBe(to);
      expect(machine.transitions).toEqual([t]);
    } else {
      expect(() => machine.to(to as (typeof MIGRATION_STATES)[number], '2026-01-01T00:00:00.000Z')).toThrow(IllegalTransitionError);
      expect(machine.state).toBe(from);
      expect(machine.transitions).toEqual([]);
    }
  });

  it('is final exactly in the states the document lists as final', () => {
    for (const state of MIGRATION_STATES) expect({ state, final: migrationStateMachine(state).isTerminal() }).toEqual({ state, final: DOCUMENTED_STATES[state].length === 0 });
  });

  it('follows a cancellation to its end, and a retry after failure', () => {
    const m = migrationStateMachine();
    for (const s of ['QUEUED', 'RUNNING', 'CANCELLING', 'CANCELLED'] as const) m.to(s, 'now');
    expect(m.isTerminal()).toBe(true);
    const retry = migrationStateMachine('FAILED');
    retry.to('PENDING', 'now', 'ferry retry');
    expect(retry.state).toBe('PENDING');
  });
});

describe('the phase state machine', () => {
  it('has exactly the documented phases', () => {
    expect([...PHASES].sort()).toEqual(Object.keys(DOCUMENTED_PHASES).sort());
  });

  it.each(pairsOf(Object.keys(DOCUMENTED_PHASES)))('from %s to %s is allowed exactly when the document says so', (from, to) => {
    const machine = phaseMachine(from as (typeof PHASES)[number]);
    if (DOCUMENTED_PHASES[from].includes(to)) {
      machine.to(to as (typeof PHASES)[number], 'now');
      expect(machine.state).toBe(to);
    } else {
      expect(() => machine.to(to as (typeof PHASES)[number], 'now')).toThrow(`illegal phase transition ${from} → ${to}`);
      expect(machine.state).toBe(from);
    }
  });

  it('walks the documented paths: full, full without validation, online with a repair round', () => {
    const paths = [
      ['FULL_MIGRATING', 'FULL_DONE', 'VALIDATING', 'COMPLETED'],
      ['FULL_MIGRATING', 'FULL_DONE', 'COMPLETED'],
      ['FULL_MIGRATING', 'FULL_DONE', 'INCR_SYNCING', 'VALIDATING', 'INCR_SYNCING', 'VALIDATING', 'AWAITING_APPROVAL', 'CUTTING_OVER', 'COMPLETED'],
      ['FULL_MIGRATING', 'FULL_DONE', 'INCR_SYNCING', 'AWAITING_APPROVAL', 'ROLLING_BACK', 'FAILED'],
    ] as const;
    for (const path of paths) {
      const machine = phaseMachine();
      for (const phase of path) machine.to(phase, 'now');
      expect(machine.transitions.map((t) => t.to)).toEqual(path);
      expect(machine.isTerminal()).toBe(true);
    }
  });
});
