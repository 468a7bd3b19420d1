/**
 * The migration's control desk: pause, resume, throttle and approve as signals arrive, and
 * forwarding to the table workflows. The rate cap is the migration's: the tables copying at
 * once share it, and each splits its share among its chunks; the share is re-sent when the
 * number of tables copying changes.
 */
import { ChildWorkflowHandle, patched, setHandler } from '@temporalio/workflow';
import { PATCHES } from '../src/core/names';
import { tablesSharing } from '../src/core/rate';
import { checkedAudit, ControlSignal, describeRate } from '../src/core/status';
import { checkThrottle, Spec, throttled } from '../src/core/spec';
import { COPIED } from './context';
import { approveCutoverSignal, Control, controlSignal, pauseSignal, resumeSignal, TableProgress, throttleSignal } from './definitions';
import { tableMigrationWorkflow } from './table';
import { Tracker } from './tracker';

export class ControlDesk {
  private control: Control = { paused: false };
  private sharingSent: number | undefined;
  /** The number of the last control forwarded (Control.seq); undefined before the patch. */
  private seq: number | undefined;
  approved = false;
  readonly children = new Map<number, ChildWorkflowHandle<typeof tableMigrationWorkflow>>();

  constructor(
    private readonly spec: Spec,
    private readonly tracker: Tracker,
  ) {
    // (Executions begun before it forwarded control unnumbered.)
    if (patched(PATCHES.sequencedControl)) this.seq = 0;
  }

  /** Registers the control signals' handlers. */
  listen(): void {
    setHandler(pauseSignal, (audit) => {
      this.record('pause', this.control.paused ? 'paused' : 'running', 'paused', audit);
      this.set({ ...this.control, paused: true });
    });
    setHandler(resumeSignal, (audit) => {
      this.record('resume', this.control.paused ? 'paused' : 'running', 'running', audit);
      this.set({ ...this.control, paused: false });
    });
    setHandler(throttleSignal, (request, audit) => {
      // Signals come from any client (the temporal CLI too): a bad value is refused, not applied.
      const checked = checkThrottle(request);
      // (Executions begun before this check applied any value: their replays must do the same.)
      if (!checked.ok && patched(PATCHES.refuseInvalidThrottle)) {
        this.tracker.warnings.push(`ignored a throttle signal: ${checked.reason}`);
        return;
      }
      const t = checked.ok ? checked.value : request;
      // A throttle changes only what it names, as a change plan's does. (Executions begun before
      // dropped the cap when a throttle named batchRows alone.)
      const next = checked.ok && patched(PATCHES.sameControls) ? throttled(this.control, t) : { ...this.control, rowsPerSecond: t.rowsPerSecond || undefined, batchRows: t.batchRows ?? this.control.batchRows };
      this.record('throttle', describeRate(this.control), describeRate(next), audit);
      this.set(next);
    });
    setHandler(approveCutoverSignal, (audit) => {
      this.record('approve', this.approved ? 'approved' : 'waiting', 'approved', audit);
      this.approved = true;
    });
  }

  /** A control signal in the status document, with who sent it and why (when they said). */
  record(signal: ControlSignal, from: string, to: string, audit: unknown): void {
    // (Executions begun before the audit recorded nothing: their replays must not add events.)
    if (!patched(PATCHES.auditedControls)) return;
    this.tracker.control(signal, from, to, checkedAudit(audit), true);
  }

  /** The control a table workflow gets: the cap with its current share, and its number. */
  forwarded(): Control {
    const c = this.control.rowsPerSecond ? { ...this.control, tablesSharing: this.sharing() } : this.control;
    return this.seq === undefined ? c : { ...c, seq: this.seq };
  }

  /** A table moved: re-send the cap when the number of tables sharing it changed. */
  onProgress(p: TableProgress): void {
    // (Executions begun before the cap was shared sent control only on signals.)
    if (this.control.rowsPerSecond && p.phase && this.sharing() !== this.sharingSent && patched(PATCHES.shareRateCapAcrossTables)) this.forward();
  }

  private sharing(): number {
    return tablesSharing(this.spec.parallelism.tables, this.tracker.tables.filter((t) => !COPIED.has(t.phase)).length);
  }

  private set(next: Control): void {
    this.control = next;
    this.tracker.paused = next.paused;
    this.forward();
  }

  private forward(): void {
    if (this.seq !== undefined) this.seq += 1;
    const c = this.forwarded();
    this.sharingSent = c.tablesSharing;
    for (const child of this.children.values()) void child.signal(controlSignal, c).catch(() => undefined);
  }
}

