/**
 * Rate-cap arithmetic, pure (workflows use it). The cap is the migration's: the tables copying
 * at once share it, and each table splits its share among its chunks copying at once.
 */

export interface RateControl {
  /** The migration's rows-per-second cap; 0 or absent: none. */
  rowsPerSecond?: number;
  /** How many tables copy at once and so share the cap (absent: 1). */
  tablesSharing?: number;
}

/**
 * One chunk's cap in rows per second, or undefined when there is none: the table's share split
 * among min(chunk parallelism, chunks not done yet), never below one row a second.
 */
export function chunkRateCap(control: RateControl, chunkParallelism: number, chunksNotDone: number): number | undefined {
  if (!control.rowsPerSecond) return undefined;
  const copyingChunks = Math.max(1, Math.min(chunkParallelism, chunksNotDone));
  const perChunk = control.rowsPerSecond / (control.tablesSharing ?? 1) / copyingChunks;
  return perChunk ? Math.max(1, Math.floor(perChunk)) : undefined;
}

/** How many tables share the cap: min(tables copied at once, tables not copied yet), at least one. */
export function tablesSharing(tableParallelism: number, tablesNotCopied: number): number {
  return Math.max(1, Math.min(tableParallelism, tablesNotCopied));
}
