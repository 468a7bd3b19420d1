/**
 * A change plan's control desk (the handlers are workflows/control-desk.ts's, shared with
 * migrations): pause, resume and throttle live in the tracker, where the backfill reads them and
 * the status document shows them; a cancel cancels the plan's scope.
 */
import { CHANGE_LIMITS } from '../../src/core/change-limits';
import { checkThrottle } from '../../src/core/spec';
import { ControlDesk } from '../control-desk';
import { Control } from '../definitions';
import { flags } from '../patches';
import { ChangeTracker } from './tracker';

export class ChangeDesk extends ControlDesk {
  constructor(
    private readonly tracker: ChangeTracker,
    private readonly cancelRun: () => void,
  ) {
    super(tracker);
  }

  protected current(): Control {
    return { paused: this.tracker.paused, ...this.tracker.throttle };
  }

  protected audited(): boolean {
    return flags.auditedChangeControls;
  }

  protected checkThrottle(request: unknown) {
    return checkThrottle(request, CHANGE_LIMITS.backfillBatchRows);
  }

  protected throttled(request: unknown): Control | undefined {
    // A batchRows out of a backfill's range is refused with a warning, as a migration refuses
    // one out of its own. (Executions begun before clamped it to 100,000 in silence.)
    if (flags.sameControls) return super.throttled(request);
    const checked = checkThrottle(request);
    if (!checked.ok) {
      this.tracker.warnings.push(`ignored a throttle signal: ${checked.reason}`);
      return undefined;
    }
    const t = checked.value;
    const { throttle } = this.tracker;
    return {
      paused: this.tracker.paused,
      rowsPerSecond: t.rowsPerSecond === undefined ? throttle.rowsPerSecond : t.rowsPerSecond || undefined,
      batchRows: t.batchRows === undefined ? throttle.batchRows : Math.min(t.batchRows, 100_000),
    };
  }

  protected reasonFor(request: unknown): string {
    // Who cancelled, in the reason the result's error gives, as a migration's says.
    // (Executions begun before gave the request's reason alone.)
    if (flags.sameControls) return super.reasonFor(request);
    return (request as { reason?: string } | undefined)?.reason ?? 'cancel requested';
  }

  protected set(next: Control): void {
    this.tracker.paused = next.paused;
    this.tracker.throttle = { rowsPerSecond: next.rowsPerSecond, batchRows: next.batchRows };
    this.tracker.publish();
  }

  protected cancelled(): void {
    this.cancelRun();
  }
}
