/**
 * How many rows a copy batch takes. A batchRows from the spec or a throttle signal is used as
 * given; otherwise batches are sized by bytes (BATCH_BYTES): by the row width the chunk's own
 * batches measured so far, and before the first one by a sample of the rows about to be copied.
 */
import { BATCH_BYTES, BATCH_ROWS } from './spec-limits';

/** Rows a batch takes when neither a measurement nor a sample gives a row width. */
export const UNSIZED_BATCH_ROWS = 50_000;

export class BatchSize {
  private rows = 0;
  private bytes = 0;

  /**
   * @param fixed the spec's or a throttle's batchRows, if any
   * @param sampledWidth bytes per row of a sample of the rows to copy (null: unknown)
   * @param rowsPerSecond the chunk's copy rate cap: a capped copy takes about a second's rows a
   *   batch, so its rate stays even rather than a burst and a long wait
   */
  constructor(
    private readonly fixed: number | undefined,
    private readonly sampledWidth: number | null,
    private readonly rowsPerSecond?: number,
  ) {}

  /** A committed batch: its rows and COPY bytes replace the sample's width. */
  record(rows: number, bytes: number): void {
    this.rows += rows;
    this.bytes += bytes;
  }

  next(): number {
    if (this.fixed !== undefined) return this.fixed;
    const width = this.rows > 0 ? this.bytes / this.rows : this.sampledWidth;
    let rows = width && width > 0 ? Math.round(BATCH_BYTES / width) : UNSIZED_BATCH_ROWS;
    if (this.rowsPerSecond) rows = Math.min(rows, this.rowsPerSecond);
    return Math.min(BATCH_ROWS.max, Math.max(BATCH_ROWS.min, rows));
  }
}
