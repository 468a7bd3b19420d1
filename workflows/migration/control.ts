/**
 * The migration's control desk (the handlers are workflows/control-desk.ts's, shared with change
 * plans): pause, resume and throttle forwarded to the table workflows. The rate cap is the migration's: the tables copying at
 * once share it, and each splits its share among its chunks; the share is re-sent when the
 * number of tables copying changes.
 */
import { ChildWorkflowHandle } from '@temporalio/workflow';
import { tablesSharing } from '../../src/core/rate';
import { checkedAudit } from '../../src/core/status';
import { checkThrottle, Spec, throttled } from '../../src/core/spec';
import { COPIED } from './context';
import { Control, controlSignal, TableProgress } from '../definitions';
import { ControlDesk } from '../control-desk';
import { tableMigrationWorkflow } from './table';
import { Tracker } from './tracker';
import { flags } from '../patches';

export class MigrationDesk extends ControlDesk {
  private control: Control = { paused: false };
  private sharingSent: number | undefined;
  /** The number of the last control forwarded (Control.seq); undefined before the patch. */
  private seq: number | undefined;
  readonly children = new Map<number, ChildWorkflowHandle<typeof tableMigrationWorkflow>>();

  constructor(
    private readonly spec: Spec,
    private readonly tracker: Tracker,
    private readonly cancelRun: () => void,
  ) {
    super(tracker);
    // (Executions begun before it forwarded control unnumbered.)
    if (flags.sequencedControl) this.seq = 0;
  }

  protected current(): Control {
    return this.control;
  }

  protected audited(): boolean {
    return flags.auditedControls;
  }

  protected checkThrottle(request: unknown) {
    return checkThrottle(request);
  }

  protected throttled(request: unknown): Control | undefined {
    const checked = this.checkThrottle(request);
    // (Executions begun before this check applied any value: their replays must do the same.)
    if (!checked.ok && flags.refuseInvalidThrottle) {
      this.tracker.warnings.push(`ignored a throttle signal: ${checked.reason}`);
      return undefined;
    }
    // (Executions begun before the products agreed dropped the cap when a throttle named
    // batchRows alone.)
    if (checked.ok && flags.sameControls) return throttled(this.control, checked.value);
    const t = (checked.ok ? checked.value : request) as { rowsPerSecond?: number; batchRows?: number };
    return { ...this.control, rowsPerSecond: t.rowsPerSecond || undefined, batchRows: t.batchRows ?? this.control.batchRows };
  }

  protected reasonFor(request: unknown): string {
    const audit = checkedAudit(request);
    // (Executions begun before the audit gave the request's reason alone.)
    return (audit.reason ?? 'cancel requested') + (audit.actor && flags.auditedControls ? ` (by ${audit.actor})` : '');
  }

  protected cancelled(): void {
    this.cancelRun();
  }

  /** The control a table workflow gets: the cap with its current share, and its number. */
  forwarded(): Control {
    const c = this.control.rowsPerSecond ? { ...this.control, tablesSharing: this.sharing() } : this.control;
    return this.seq === undefined ? c : { ...c, seq: this.seq };
  }

  /** A table moved: re-send the cap when the number of tables sharing it changed. */
  onProgress(p: TableProgress): void {
    // (Executions begun before the cap was shared sent control only on signals.)
    if (this.control.rowsPerSecond && p.phase && this.sharing() !== this.sharingSent && flags.shareRateCapAcrossTables) this.forward();
  }

  private sharing(): number {
    return tablesSharing(this.spec.parallelism.tables, this.tracker.tables.filter((t) => !COPIED.has(t.phase)).length);
  }

  protected set(next: Control): void {
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
