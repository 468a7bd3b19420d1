/**
 * Chunk planning: a table's key space cut into half-open ranges that copy in parallel. Integer,
 * text, uuid and composite keys are all cut at sampled quantiles, which also keeps chunks even
 * when the key space has large gaps. Pure module.
 */
import { ChunkPlan, Key, ValidationUnit } from './plan';

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
  return boundaryPositions(sortedKeys, 0, sortedKeys.length, chunks).map((i) => sortedKeys[i]);
}

/**
 * Positions of up to parts-1 boundaries that cut sortedKeys[from, to) evenly: a boundary never
 * repeats the one before it nor the slice's first key (a range must not be empty by design).
 */
function boundaryPositions(sortedKeys: Key[], from: number, to: number, parts: number): number[] {
  const positions: number[] = [];
  const n = to - from;
  if (parts <= 1 || n <= 0) return positions;
  for (let i = 1; i < parts; i += 1) {
    const at = from + Math.floor((i * n) / parts);
    const key = sortedKeys[at];
    const previous = positions.length ? sortedKeys[positions[positions.length - 1]] : undefined;
    if (key && (!previous || !sameKey(previous, key)) && !sameKey(key, sortedKeys[from])) positions.push(at);
  }
  return positions;
}

/** Rows one validation statement reads on each side, about: a scan of seconds, not minutes. */
export const VALIDATION_UNIT_ROWS = 1_000_000;

/**
 * Validation units: each chunk cut into ranges of about VALIDATION_UNIT_ROWS rows, at keys of
 * the same sample (so every unit lies inside its chunk, whose fence guards a repair). Sized by
 * rows, not by how many chunks copy at once; empty when no chunk needs cutting.
 */
export function validationUnits(sortedKeys: Key[], chunks: ChunkPlan[], estimatedRows: number, unitRows = VALIDATION_UNIT_ROWS): ValidationUnit[] {
  const perChunk = Math.ceil(estimatedRows / Math.max(1, chunks.length) / unitRows);
  if (perChunk <= 1 || sortedKeys.length === 0) return [];
  const chunkStarts = [0, ...boundaryPositions(sortedKeys, 0, sortedKeys.length, chunks.length), sortedKeys.length];
  const units: ValidationUnit[] = [];
  chunks.forEach((chunk, c) => {
    const cuts = boundaryPositions(sortedKeys, chunkStarts[c], chunkStarts[c + 1], perChunk).map((i) => sortedKeys[i]);
    const bounds = [chunk.lower, ...cuts, chunk.upper];
    for (let u = 0; u + 1 < bounds.length; u += 1) units.push({ chunk: chunk.index, lower: bounds[u], upper: bounds[u + 1] });
  });
  return units;
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
