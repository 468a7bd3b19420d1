/**
 * What both products' trackers keep the same way: the event log (capped at MAX_EVENTS_KEPT, the
 * oldest dropped and counted, each event handed to the webhooks), the control signals taken with
 * who sent them and why, warnings, the pause flag, the error and end, the search attributes,
 * upserted only when state or phase change, and the Web UI's current details, rendered once per
 * activation and shown as a fault in their place when rendering fails. Each product adds its machines, its progress and its
 * status document (workflows/migration/tracker.ts, workflows/change/tracker.ts).
 */
import { setCurrentDetails, upsertSearchAttributes } from '@temporalio/workflow';
import { detailsOrFault } from '../src/core/details';
import { FerryPhaseKey, FerryStateKey } from '../src/core/names';
import { Audit, ControlSignal, ControlTransition, ErrorInfo } from '../src/core/status';
import type { EventStreamWhere } from '../src/core/event-subjects';

export const MAX_EVENTS_KEPT = 200;

/** An event of either product: a number, a type, a time, and where it happened. */
interface BaseEvent {
  seq: number;
  type: string;
  at: string;
  detail?: Record<string, unknown>;
}

export abstract class TrackerBase<E extends BaseEvent> {
  readonly warnings: string[] = [];
  protected readonly events: E[] = [];
  /** Control signals taken, with who sent them and why. */
  protected readonly controls: ControlTransition[] = [];
  protected nextSeq = 1;
  protected dropped = 0;
  paused = false;
  error?: ErrorInfo;
  endedAt?: string;
  /** Called for every appended event (event webhooks, the event stream). */
  onEvent?: (event: E) => void;
  /** Where the events also go (the event stream), once the workers published the first. */
  eventStream?: EventStreamWhere;
  /** The search attribute values last upserted (upserts are history events: only on change). */
  protected published?: { state: string; phase: string };

  now(): string {
    return new Date().toISOString();
  }

  /** Appends an event at `place` (a table, a step, or nowhere), dropping the oldest past the cap. */
  protected append(type: E['type'], place: Omit<E, keyof BaseEvent>, detail?: Record<string, unknown>): E {
    const e = { seq: this.nextSeq++, type, at: this.now(), ...place } as E;
    if (detail !== undefined) e.detail = detail;
    this.events.push(e);
    if (this.events.length > MAX_EVENTS_KEPT) {
      this.events.shift();
      this.dropped += 1;
    }
    this.onEvent?.(e);
    return e;
  }

  /** The workers publish this run's events to the stream: the status and details say where. */
  streamingTo(where: EventStreamWhere): void {
    this.eventStream = where;
    this.refresh();
  }

  /** The status changed in a way the subclass shows: details and attributes again. */
  protected abstract refresh(): void;

  /** Records a control signal beside the transitions and reports it as a ControlReceived event. */
  control(signal: ControlSignal, from: string, to: string, audit: Audit): void {
    this.controls.push({ machine: 'control', signal, from, to, at: this.now(), ...audit });
    this.append('ControlReceived', {} as Omit<E, keyof BaseEvent>, { signal, from, to, ...audit });
  }

  /** Upserts FerryState and FerryPhase when they differ from the last upsert (always, with `everyTime`). */
  protected upsertStatePhase(state: string, phase: string, everyTime = false): void {
    if (!everyTime && this.published?.state === state && this.published?.phase === phase) return;
    upsertSearchAttributes([
      { key: FerryStateKey, value: state },
      { key: FerryPhaseKey, value: phase },
    ]);
    this.published = { state, phase };
  }

  private detailsQueued = false;

  /**
   * The Web UI's current details, rendered once per activation however many changes it brought:
   * a migration's hold a row for every table, and rendering them on each progress report cost a
   * run of 500 tables about 2 s of the worker's CPU. The workflow thread runs an activation's
   * microtasks before it completes, and details are no command, so replay is unaffected. A fault
   * in rendering them is shown in their place: details are for people, and must not fail the
   * workflow task that carries the run on.
   */
  protected renderDetails(render: () => string): void {
    if (this.detailsQueued) return;
    this.detailsQueued = true;
    void Promise.resolve().then(() => {
      this.detailsQueued = false;
      setCurrentDetails(detailsOrFault(render));
    });
  }
}
