/**
 * The control desk both products share: one handler per control signal (pause, resume, throttle,
 * approveCutover, cancel), registered together, each validating what it is sent, recording it
 * with who sent it and why (the status document's transitions and a ControlReceived event), and
 * then handing the new state to the product: a migration forwards it to its table workflows, a
 * change plan publishes it for its backfill. Behaviour that only executions begun before the two
 * products agreed still have is in the subclasses, behind their patches.
 */
import { setHandler } from '@temporalio/workflow';
import { throttled } from '../src/core/spec';
import { Audit, checkedAudit, ControlSignal, describeRate } from '../src/core/status';
import { approveCutoverSignal, cancelSignal, Control, pauseSignal, resumeSignal, throttleSignal } from './definitions';

/** Where a desk records what it took (both products' trackers). */
export interface ControlRecorder {
  warnings: string[];
  control(signal: ControlSignal, from: string, to: string, audit: Audit): void;
}

export abstract class ControlDesk {
  approved = false;
  /** Why the run was cancelled, and by whom, once a cancel has arrived. */
  cancelReason: string | undefined;

  constructor(protected readonly recorder: ControlRecorder) {}

  /** Registers every control signal's handler. */
  listen(): void {
    setHandler(pauseSignal, (audit) => {
      this.record('pause', this.current().paused ? 'paused' : 'running', 'paused', audit);
      this.set({ ...this.current(), paused: true });
    });
    setHandler(resumeSignal, (audit) => {
      this.record('resume', this.current().paused ? 'paused' : 'running', 'running', audit);
      this.set({ ...this.current(), paused: false });
    });
    setHandler(throttleSignal, (request, audit) => {
      // Signals come from any client (the temporal CLI too): a bad value is refused, not applied.
      const next = this.throttled(request);
      if (next === undefined) return;
      this.record('throttle', describeRate(this.current()), describeRate(next), audit);
      this.set(next);
    });
    setHandler(approveCutoverSignal, (audit) => this.approve(audit));
    setHandler(cancelSignal, (request) => {
      this.record('cancel', this.cancelReason ? 'cancelling' : 'running', 'cancelling', request);
      this.cancelReason = this.reasonFor(request);
      this.cancelled();
    });
  }

  /** The cutover (or a rewrite's swap) approved: by the signal, or by a signed message (approval: event). */
  approve(audit: unknown): void {
    this.record('approve', this.approved ? 'approved' : 'waiting', 'approved', audit);
    this.approved = true;
  }

  /** A control signal in the status document and the events, with who sent it and why. */
  record(signal: ControlSignal, from: string, to: string, audit: unknown): void {
    // (Executions begun before the audit recorded nothing: an event can send a callback.)
    if (!this.audited()) return;
    this.recorder.control(signal, from, to, checkedAudit(audit));
  }

  /** A throttle's new control: only what it names changes; undefined when it is refused (with a warning). */
  protected throttled(request: unknown): Control | undefined {
    const checked = this.checkThrottle(request);
    if (!checked.ok) {
      this.recorder.warnings.push(`ignored a throttle signal: ${checked.reason}`);
      return undefined;
    }
    return throttled(this.current(), checked.value);
  }

  /** The cancel's reason, naming who cancelled when they said. */
  protected reasonFor(request: unknown): string {
    const audit = checkedAudit(request);
    return (audit.reason ?? 'cancel requested') + (audit.actor ? ` (by ${audit.actor})` : '');
  }

  /** The control as it stands: paused or not, the rate cap and batch size. */
  protected abstract current(): Control;
  /** Whether this execution records controls (its audit patch). */
  protected abstract audited(): boolean;
  /** The throttle's check against the product's own batchRows range. */
  protected abstract checkThrottle(request: unknown): { ok: true; value: { rowsPerSecond?: number; batchRows?: number } } | { ok: false; reason: string };
  /** Takes a new control: pause, resume or throttle. */
  protected abstract set(next: Control): void;
  /** A cancel arrived (cancelReason is set): cancel the run's work. */
  protected abstract cancelled(): void;
}
