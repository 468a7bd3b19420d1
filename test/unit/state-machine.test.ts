import {
  IllegalTransitionError,
  MIGRATION_STATES,
  MIGRATION_TRANSITIONS,
  migrationStateMachine,
  PHASE_TRANSITIONS,
  phaseMachine,
  PHASES,
} from '../../src/core/state-machine';

describe('the migration state machine', () => {
  const pairs = MIGRATION_STATES.flatMap((from) => MIGRATION_STATES.map((to) => [from, to] as const));

  it.each(pairs)('from %s to %s is allowed exactly when the table says so', (from, to) => {
    const machine = migrationStateMachine(from);
    if (MIGRATION_TRANSITIONS[from].includes(to)) {
      const t = machine.to(to, '2026-01-01T00:00:00.000Z', 'because');
      expect(t).toEqual({ from, to, at: '2026-01-01T00:00:00.000Z', reason: 'because' });
      expect(machine.state).toBe(to);
      expect(machine.transitions).toEqual([t]);
    } else {
      expect(() => machine.to(to, '2026-01-01T00:00:00.000Z')).toThrow(IllegalTransitionError);
      expect(machine.state).toBe(from);
      expect(machine.transitions).toEqual([]);
    }
  });

  it('follows the seed chapters: success, cancellation, retry after failure', () => {
    const m = migrationStateMachine();
    for (const s of ['QUEUED', 'RUNNING', 'CANCELLING', 'CANCELLED'] as const) m.to(s, 'now');
    expect(m.isTerminal()).toBe(true);
    const retry = migrationStateMachine('FAILED');
    retry.to('PENDING', 'now', 'ferry retry');
    expect(retry.state).toBe('PENDING');
  });
});

describe('the phase state machine', () => {
  const pairs = PHASES.flatMap((from) => PHASES.map((to) => [from, to] as const));

  it.each(pairs)('from %s to %s is allowed exactly when the table says so', (from, to) => {
    const machine = phaseMachine(from);
    if (PHASE_TRANSITIONS[from].includes(to)) {
      machine.to(to, 'now');
      expect(machine.state).toBe(to);
    } else {
      expect(() => machine.to(to, 'now')).toThrow(`illegal phase transition ${from} → ${to}`);
    }
  });

  it('lets every live phase roll back, and nothing leave COMPLETED or FAILED', () => {
    for (const phase of PHASES.filter((p) => !['COMPLETED', 'FAILED', 'ROLLING_BACK'].includes(p))) {
      expect(PHASE_TRANSITIONS[phase]).toContain('ROLLING_BACK');
    }
    expect(PHASE_TRANSITIONS.COMPLETED).toEqual([]);
    expect(PHASE_TRANSITIONS.FAILED).toEqual([]);
  });
});
