/**
 * Logical capture's consumer in the parent (docs/architecture.md §6): streamChanges slices, one
 * after the other, in a scope of their own, from after installCapture until the cutover's drain
 * is done. A failure of the consumer (its retries exhausted, or the slot lost) fails the migration.
 */
import { CancellationScope } from '@temporalio/workflow';
import type { CaptureTable } from '../activities/capture';
import { stream } from './proxies';

/** One streamChanges call: long enough to add little history, short enough to stay well inside its timeout. */
export const STREAM_SLICE_MS = 5 * 60_000;

export class CaptureStream {
  private readonly scope = new CancellationScope();
  private stopping = false;
  readonly done: Promise<void>;

  constructor(
    input: { migrationId: string; source: string; tables: CaptureTable[] },
    onFailure: (error: unknown) => void,
  ) {
    this.done = this.scope
      .run(async () => {
        while (!this.stopping) await stream.streamChanges({ ...input, sliceMs: STREAM_SLICE_MS });
      })
      .catch((error: unknown) => {
        if (!this.stopping) onFailure(error);
      });
  }

  /** Ends the consumer and waits until its activity has acknowledged. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.scope.cancel();
    await this.done;
  }
}
