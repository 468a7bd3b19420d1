/**
 * Logical capture's consumer in the parent (docs/architecture.md §6): streamChanges slices, one
 * after the other, in a scope of their own, from after installCapture until the cutover's drain
 * is done. A failure of the consumer (its retries exhausted, or the slot lost) fails the migration.
 */
import { CancellationScope, condition } from '@temporalio/workflow';
import type { CaptureTable } from '../../activities/capture';
import type { MigrationActivities } from '../activity-options';

/** One streamChanges call: long enough to add little history, short enough to stay well inside its timeout. */
export const STREAM_SLICE_MS = 5 * 60_000;

export class CaptureStream {
  private readonly scope = new CancellationScope();
  private stopping = false;
  readonly done: Promise<void>;
  /** Why the consumer stopped for good, once it has (not when it was stopped). */
  failure: { error: unknown } | undefined;

  constructor(
    stream: MigrationActivities['stream'],
    input: { migrationId: string; source: string; tables: CaptureTable[] },
    onFailure: (error: unknown) => void,
  ) {
    this.done = this.scope
      .run(async () => {
        while (!this.stopping) await stream.streamChanges({ ...input, sliceMs: STREAM_SLICE_MS });
      })
      .catch((error: unknown) => {
        if (this.stopping) return;
        this.failure = { error };
        onFailure(error);
      });
  }

  private failed(): unknown {
    return this.failure?.error;
  }

  /**
   * Runs `work` (a wait of the cutover) unless the consumer fails meanwhile: then the work is
   * cancelled and the consumer's failure thrown — nothing it missed could reach the logs.
   */
  async unlessFailed<T>(work: () => Promise<T>): Promise<T> {
    if (this.failure) throw this.failure.error;
    const scope = new CancellationScope();
    const watch = scope.run(() => condition(() => this.failure !== undefined));
    watch.then(
      () => scope.cancel(),
      () => undefined,
    );
    try {
      return await scope.run(work);
    } catch (err) {
      // Read anew: it may have failed while the work ran.
      throw this.failed() ?? err;
    } finally {
      // The watch ends with the work (a cancelled condition adds nothing to the history).
      scope.cancel();
    }
  }

  /** Ends the consumer and waits until its activity has acknowledged. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.scope.cancel();
    await this.done;
  }
}
