/**
 * changeWorkflow's view of a change plan: the plan's state and phase machines, one guarded state
 * machine per step with every move recorded, the event log (capped), and the status document
 * built from them. Search attributes follow state and phase, upserted only when they change.
 */
import { changeDetails } from '../../src/core/details';
import { ChangeStep, stepLabel } from '../../src/core/change-plan';
import {
  ChangeEvent,
  ChangeEventType,
  ChangePhase,
  changePhaseMachine,
  ChangeStatusDocument,
  ChangeTransition,
  StepProgress,
  StepState,
  StepStatus,
  stepMachine,
} from '../../src/core/change-status';
import { migrationStateMachine, MigrationState, StateMachine, Transition } from '../../src/core/state-machine';
import { ControlTransition } from '../../src/core/status';
import { TrackerBase } from '../tracker-base';

/** A state machine as data: where it is and how it got there. */
interface MachineSnapshot<S extends string> {
  state: S;
  transitions: Transition<S>[];
}

/** Everything the tracker knows, as data: what a run that continues as new starts from. */
export interface ChangeTrackerSnapshot {
  state: MachineSnapshot<MigrationState>;
  phase: MachineSnapshot<ChangePhase>;
  steps: StepStatus[];
  machines: MachineSnapshot<StepState>[];
  warnings: string[];
  events: ChangeEvent[];
  controls: ControlTransition[];
  nextSeq: number;
  dropped: number;
  paused: boolean;
  throttle: { rowsPerSecond?: number; batchRows?: number };
}

const machineSnapshot = <S extends string>(m: StateMachine<S>): MachineSnapshot<S> => ({ state: m.state, transitions: [...m.transitions] });

export class ChangeTracker extends TrackerBase<ChangeEvent> {
  state: StateMachine<MigrationState> = migrationStateMachine();
  phase = changePhaseMachine();
  readonly steps: StepStatus[];
  private machines: StateMachine<StepState>[];
  waiting?: string;
  throttle: { rowsPerSecond?: number; batchRows?: number } = {};

  constructor(
    readonly id: string,
    readonly runId: string,
    readonly database: string,
    readonly startedAt: string,
    plan: ChangeStep[],
  ) {
    super();
    this.steps = plan.map((step) => ({ index: step.index, kind: step.kind, label: stepLabel(step), state: 'PENDING' }));
    this.machines = plan.map(() => stepMachine());
  }

  setState(to: MigrationState, reason?: string, at = this.now()): void {
    this.state.to(to, at, reason);
    this.publish();
  }

  setPhase(to: ChangePhase, reason?: string): void {
    if (this.phase.state === to) return;
    this.phase.to(to, this.now(), reason);
    this.publish();
  }

  /** Moves step `index` (guarded by the step machine) and keeps its times. */
  setStep(index: number, to: StepState, reason?: string): void {
    const at = this.now();
    this.machines[index].to(to, at, reason);
    const step = this.steps[index];
    step.state = to;
    if (to === 'RUNNING') {
      step.startedAt = at;
      delete step.endedAt;
      delete step.error;
    } else if (to !== 'SKIPPED') step.endedAt = at;
    this.publish();
  }

  snapshot(): ChangeTrackerSnapshot {
    return {
      state: machineSnapshot(this.state),
      phase: machineSnapshot(this.phase),
      steps: this.steps,
      machines: this.machines.map(machineSnapshot),
      warnings: this.warnings,
      events: this.events,
      controls: this.controls,
      nextSeq: this.nextSeq,
      dropped: this.dropped,
      paused: this.paused,
      throttle: this.throttle,
    };
  }

  /** Takes up where a previous run of the same change plan left off (continue-as-new). */
  restore(s: ChangeTrackerSnapshot): void {
    this.state = migrationStateMachine(s.state.state, s.state.transitions);
    this.phase = changePhaseMachine(s.phase.state, s.phase.transitions);
    this.steps.splice(0, this.steps.length, ...s.steps);
    this.machines = s.machines.map((m) => stepMachine(m.state, m.transitions));
    this.warnings.splice(0, this.warnings.length, ...s.warnings);
    this.events.splice(0, this.events.length, ...s.events);
    this.controls.splice(0, this.controls.length, ...s.controls);
    this.nextSeq = s.nextSeq;
    this.dropped = s.dropped;
    this.paused = s.paused;
    this.throttle = s.throttle;
    this.published = undefined;
    this.publish();
  }

  stepState(index: number): StepState {
    return this.machines[index].state;
  }

  progress(index: number, progress: StepProgress): void {
    this.steps[index].progress = progress;
  }

  event(type: ChangeEventType, step?: number, detail?: Record<string, unknown>): void {
    this.append(type, step !== undefined ? { step } : {}, detail);
  }

  setWaiting(reason: string | undefined): void {
    if (this.waiting === reason) return;
    this.waiting = reason;
    this.publish();
  }

  protected refresh(): void {
    this.publish();
  }

  publish(): void {
    this.upsertStatePhase(this.state.state, this.phase.state);
    this.renderDetails(() => changeDetails(this.document()));
  }

  document(): ChangeStatusDocument {
    const transitions: ChangeTransition[] = [
      ...this.state.transitions.map((t) => ({ machine: 'state' as const, ...t })),
      ...this.phase.transitions.map((t) => ({ machine: 'phase' as const, ...t })),
      ...this.machines.flatMap((m, step) => m.transitions.map((t) => ({ machine: 'step' as const, step, ...t }))),
      ...this.controls,
    ].sort((a, b) => a.at.localeCompare(b.at));
    const doc: ChangeStatusDocument = {
      kind: 'change',
      id: this.id,
      runId: this.runId,
      database: this.database,
      state: this.state.state,
      phase: this.phase.state,
      paused: this.paused,
      throttle: this.throttle,
      steps: this.steps,
      events: this.events,
      transitions,
      startedAt: this.startedAt,
    };
    if (this.waiting) doc.waiting = this.waiting;
    if (this.error) doc.error = this.error;
    if (this.warnings.length) doc.warnings = this.warnings;
    if (this.endedAt) doc.endedAt = this.endedAt;
    if (this.dropped) doc.eventsDropped = this.dropped;
    if (this.eventStream) doc.eventStream = this.eventStream;
    return doc;
  }
}
