/**
 * Chunk planning: a table's key space cut into half-open ranges that copy in parallel. Integer,
 * text, uuid and composite keys are all cut at sampled quantiles, which also keeps chunks even
 * when the key space has large gaps. Pure module.
 */
import { ChunkPlan, Key } from './plan';

export const ROWS_PER_AUTO_CHUNK = 500_000;
/** Tables up to this many rows are planned from every key; bigger ones from a sample. */
export const EXACT_PLAN_ROWS = 50_000;
export const SAMPLE_KEYS = 20_000;

/**
 * One chunk per half-million rows, but never more than can copy at once: chunks beyond the
 * parallelism only queue up, and the last round's stragglers then copy alone (measured: 4
 * chunks two at a time take 10–15% longer than 2). Batches keep big chunks resumable.
 */
export function autoChunkCount(estimatedRows: number, parallelism: number): number {
  return Math.min(parallelism, Math.max(1, Math.ceil(estimatedRows / ROWS_PER_AUTO_CHUNK)));
}

/** TABLESAMPLE SYSTEM percentage that yields about SAMPLE_KEYS keys. */
export function samplePercent(estimatedRows: number): number {
  return Math.min(100, Math.max(0.0001, (100 * SAMPLE_KEYS) / Math.max(1, estimatedRows)));
}

/** n-1 boundaries at even positions of the sorted keys (fewer when there are fewer keys). */
export function pickBoundaries(sortedKeys: Key[], chunks: number): Key[] {
  const boundaries: Key[] = [];
  if (chunks <= 1 || sortedKeys.length === 0) return boundaries;
  for (let i = 1; i < chunks; i += 1) {
    const key = sortedKeys[Math.floor((i * sortedKeys.length) / chunks)];
    const previous = boundaries[boundaries.length - 1];
    if (key && (!previous || !sameKey(previous, key)) && !sameKey(key, sortedKeys[0])) boundaries.push(key);
  }
  return boundaries;
}

/** [-∞, b1), [b1, b2), …, [bn, +∞) */
export function rangesFromBoundaries(boundaries: Key[]): ChunkPlan[] {
  const chunks: ChunkPlan[] = [];
  for (let i = 0; i <= boundaries.length; i += 1) {
    chunks.push({ index: i, lower: i === 0 ? null : boundaries[i - 1], upper: i === boundaries.length ? null : boundaries[i] });
  }
  return chunks;
}

export function sameKey(a: Key, b: Key): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
