/**
 * Activity calls that a control change interrupts: pause, throttle and the cutover cancel the
 * running slices of the kinds they concern; each stops after its current batch, whose
 * checkpoint is committed, and the next slice carries on under the new control.
 */
import { CancellationScope } from '@temporalio/workflow';

export type SliceKind = 'copy' | 'sync';

export class Slices {
  private readonly running = new Map<CancellationScope, SliceKind>();
  /** Grows with every interruption: a slice that ends after one was interrupted, not failed. */
  private version = 0;

  interrupt(kinds: SliceKind[]): void {
    this.version += 1;
    for (const [scope, kind] of this.running) if (kinds.includes(kind)) scope.cancel();
  }

  /** The slice's result, or undefined when an interruption ended it. */
  async run<T>(kind: SliceKind, fn: () => Promise<T>): Promise<T | undefined> {
    const scope = new CancellationScope();
    const version = this.version;
    this.running.set(scope, kind);
    try {
      return await scope.run(fn);
    } catch (err) {
      // However an interrupted slice ended (cancelled, or timed out on a dead worker), its
      // committed work stands; anything else is a real failure.
      if (this.version !== version && !CancellationScope.current().consideredCancelled) return undefined;
      throw err;
    } finally {
      this.running.delete(scope);
    }
  }
}
