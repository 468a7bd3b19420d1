/**
 * copyChunk: one slice of a chunk's copy. Keyset batches, each one target transaction: check
 * the fence, COPY the batch's rows, advance the checkpoint. Returns after
 * about `sliceMs` with the committed checkpoint, so the workflow can pause, throttle or cancel
 * between slices; heartbeats inside, so a dead worker is noticed within the heartbeat timeout.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { ClientBase, Pool } from 'pg';
import { advanceCheckpoint, ChunkRef, touchCheckpoint } from '../src/db/bookkeeping';
import { copyBlockRange, copyRange, selectColumns } from '../src/db/copy-stream';
import { BatchSize } from '../src/core/batch-size';
import { KeyStride, STRIDE_TOLERANCE } from '../src/core/key-stride';
import { withFencedSessions } from '../src/db/fenced';
import type { CopyTable } from '../src/core/plan';
import { asActivityFailure } from '../src/db/errors';
import { blockPredicate, Bound, keyAsText, keyFromRow, keyOrder, keyPredicate, literalBinder, ParamBinder } from '../src/db/ranges';
import { displayQualified, quoteQualified } from '../src/core/identifiers';
import { ChunkCheckpoint, ChunkPlan, copiesByBlocks, copyTableOf, isKeyless, Key, SMALL_TABLE_ROWS, TablePlan } from '../src/core/plan';
import { sameSummary, wholeSummary } from '../src/db/summaries';
import { blockLayout, hasUniqueIndexOver } from '../src/db/catalog';
import { FAILURE } from '../src/core/failure-types';
import { ActivityDeps, tableLabel } from './deps';
import type { Logger } from '../src/logger';
import { FinishTable, finishSmallTable } from '../src/db/index-build';
import { copyInOneSnapshot } from '../src/db/keyless-sync';

export interface CopyChunkInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  chunk: ChunkPlan;
  /** Rows a batch; absent: batches sized by bytes (src/core/batch-size.ts). */
  batchRows?: number;
  /** Grows with every dispatch of this chunk; with the attempt number it forms the fence token. */
  fence: number;
  sliceMs: number;
  /** Copy rate cap for this chunk (the workflow divides the migration's cap among its chunks). */
  rowsPerSecond?: number;
  /**
   * A small table's only chunk (full mode): once it is done, the same activity builds the
   * table's primary key (`primaryKey`: it was loaded without it), its indexes and constraints,
   * and runs ANALYZE (finishSmallTable) — if it copied no more than SMALL_TABLE_ROWS rows.
   */
  finish?: { table: FinishTable; primaryKey: boolean };
}

export interface CopyChunkResult {
  checkpoint: ChunkCheckpoint;
  rows: number;
  bytes: number;
  batches: number;
  /** With `finish`, once the chunk is done: the indexes and constraints built. */
  finished?: { built: number; evicted: number };
  /** Batches whose end came from the key's arithmetic rather than an index walk (KeyStride). */
  stepped?: number;
}

/** Under a rate cap, sleeps until the slice's rows so far are due (never past the slice's end). */
async function pace(ctx: Context, input: CopyChunkInput, rows: number, started: number): Promise<void> {
  if (!input.rowsPerSecond) return;
  const due = (rows / input.rowsPerSecond) * 1000 - (Date.now() - started);
  if (due > 0) await ctx.sleep(Math.min(due, input.sliceMs));
}

/**
 * A small table's last slice (`finish`, full mode): its primary key, indexes and constraints
 * built and ANALYZE run by this activity — only when the chunk is done and really is small.
 */
async function finishIfSmall(connections: ActivityDeps['connections'], input: CopyChunkInput, table: CopyTable, result: CopyChunkResult, log: Logger): Promise<CopyChunkResult> {
  const { checkpoint } = result;
  if (!checkpoint.done || !input.finish || checkpoint.rowsCopied > SMALL_TABLE_ROWS) return result;
  const { finish } = input;
  const ctx = Context.current();
  const finished = await connections.withClient(input.source, (s) =>
    connections.withClient(input.target, (t) =>
      finishSmallTable(s, t, { migrationId: input.migrationId, table: finish.table, copyTable: table, primaryKey: finish.primaryKey }, log, () =>
        ctx.heartbeat({ chunk: input.chunk.index, rowsCopied: checkpoint.rowsCopied }),
      ),
    ),
  );
  return { ...result, finished };
}

/** One batch to copy: its key range, its end (null: the chunk's last), and the rows it was sized for. */
interface Batch {
  bounds: Bound[];
  end: Key | null;
  /** The key it starts after (null: the chunk's lower bound). */
  after: Key | null;
  wanted: number;
  stepped: boolean;
}

/** Rows read to learn the width of a chunk's next rows (BatchSize). */
const WIDTH_SAMPLE_ROWS = 100;

export function createCopyChunk({ connections, logger, metrics }: ActivityDeps) {
  return async function copyChunk(input: CopyChunkInput): Promise<CopyChunkResult> {
    const ctx = Context.current();
    const log = logger.child({ migrationId: input.migrationId, table: displayQualified(input.table.source), chunk: input.chunk.index, attempt: ctx.info.attempt });
    const started = Date.now();
    try {
      return await withFencedSessions(connections, input, input.chunk.index, async ({ source, target, table, claimed, write }) => {
        const ref: ChunkRef = { migrationId: input.migrationId, tableIndex: table.index, chunkIndex: input.chunk.index };
        if (table.copyBy === 'snapshot') return copySnapshot({ input, table, ref, claimed, source, target, write, started, metrics, log }, connections);
        if (copiesByBlocks(table)) return finishIfSmall(connections, input, table, await copyBlockSlice({ input, table, ref, claimed, source, target, write, started, metrics, log }), log);
        const chunk = { ...input, table };
        let checkpoint: ChunkCheckpoint = claimed;
        let rows = 0;
        let bytes = 0;
        let batches = 0;
        // Batch ends are looked up on a pooled connection, beside the copy's own sessions.
        const keys = connections.pool(input.source);
        // Batches sized by bytes (no batchRows given) start from the width of the next rows.
        const [width, stride] = await Promise.all([
          input.batchRows === undefined && !checkpoint.done ? sampleWidth(keys, chunk, checkpoint.lastKey) : null,
          checkpoint.done ? undefined : strideFor(keys, chunk),
        ]);
        const size = new BatchSize(input.batchRows, width, input.rowsPerSecond);
        let stepped = 0;
        let more = !checkpoint.done;
        let after = checkpoint.lastKey;
        /** The next batch, its end walked to while the batch before it copies. */
        let ahead: Promise<Batch> | undefined;
        // At least one batch per call, however short the slice: every call makes progress.
        while (more && (batches === 0 || Date.now() - started < input.sliceMs)) {
          // Every committed batch is a resume point, so stopping between batches loses nothing.
          if (ctx.cancellationSignal.aborted) throw new CancelledFailure('chunk copy cancelled');
          const batch = await (ahead ?? nextBatch(keys, chunk, after, size.next(), stride));
          more = batch.end !== null;
          after = batch.end;
          // A stride steps to the next end once this batch's rows are known (no index walk to
          // hide); without one, or when this batch cannot teach it a density (the first of a chunk
          // unbounded below), the next end is walked to now, while this batch copies.
          ahead = more && !stride?.learnsFrom(batch.after) ? nextBatch(keys, chunk, after, size.next()) : undefined;
          ahead?.catch(() => undefined); // awaited on the next turn; never left unhandled
          const stats = await write(async () => {
            // Data and checkpoint commit together, so a batch lost in a target crash is simply
            // copied again: no need to wait for each commit's WAL flush. The slice ends with a
            // synchronous commit, so nothing reported to the workflow can be lost.
            await target.query('SET LOCAL synchronous_commit = off');
            // No DELETE of the batch's range first: a batch commits with its checkpoint, under the
            // chunk's fence, so the range after a committed checkpoint is empty — no earlier
            // attempt can have written there (test/integration/copy-invariant.test.ts checks it
            // after every slice, interrupted ones included). A target loaded without its primary
            // key could only answer such a DELETE with a scan of the whole table.
            const copied = await copyRange(source, target, table, batch.bounds, (b) =>
              ctx.heartbeat({ chunk: input.chunk.index, rowsCopied: checkpoint.rowsCopied, bytes: bytes + b }),
            );
            await advanceCheckpoint(target, ref, batch.end, copied.rows, batch.end === null);
            return copied;
          });
          rows += stats.rows;
          bytes += stats.bytes;
          batches += 1;
          // Counted as each batch commits: an attempt that fails later has still copied these.
          metrics?.rowsCopied.inc({ table: tableLabel(input.table) }, stats.rows);
          metrics?.bytesCopied.inc({ table: tableLabel(input.table) }, stats.bytes);
          metrics?.batches.inc({ table: tableLabel(input.table) });
          size.record(stats.rows, stats.bytes);
          stride?.record(batch.after, batch.end, stats.rows, batch.wanted);
          if (batch.stepped) stepped += 1;
          checkpoint = { lastKey: batch.end ?? checkpoint.lastKey, rowsCopied: checkpoint.rowsCopied + stats.rows, done: batch.end === null };
          // The chunk's committed rows, for `ferry status` between the slice's reports (src/client/status-reader.ts).
          ctx.heartbeat({ chunk: input.chunk.index, rowsCopied: checkpoint.rowsCopied });
          if (!checkpoint.done) await pace(ctx, input, rows, started);
        }
        // Durability barrier before the workflow hears of this progress: a synchronous commit
        // flushes the WAL of every asynchronously committed batch before it.
        if (batches > 0) await touchCheckpoint(target, ref);
        log.info({ rows, bytes, batches, stepped, ms: Date.now() - started, done: checkpoint.done }, 'chunk slice copied');
        // Only a table that really is small: statistics can be stale, and a table that turns out
        // large gets its key and indexes from activities of their own, as any other (the
        // workflow sees no `finished`), rather than in this activity's last slice.
        const result: CopyChunkResult = { checkpoint, rows, bytes, batches, ...(stepped ? { stepped } : {}) };
        return finishIfSmall(connections, input, table, result, log);
      });
    } catch (err) {
      if (err instanceof CancelledFailure) throw err;
      // Logged as it leaves the worker: a PostgreSQL error's row values stay out of the log too.
      const failure = asActivityFailure(err, `copy ${displayQualified(input.table.source)} chunk ${input.chunk.index}`);
      if (!(err instanceof ApplicationFailure)) log.warn({ err: failure }, 'chunk slice failed');
      throw failure;
    }
  };
}

/** What copyBlockSlice needs of the activity and its fenced sessions. */
interface BlockSlice {
  input: CopyChunkInput;
  table: CopyTable;
  ref: ChunkRef;
  claimed: ChunkCheckpoint;
  source: ClientBase;
  target: ClientBase;
  write: <R>(work: () => Promise<R>) => Promise<R>;
  started: number;
  metrics: ActivityDeps['metrics'];
  log: Logger;
}

/** A table without a key, online: the whole of it in one snapshot at a known position (src/db/keyless-sync.ts). */
async function copySnapshot(s: BlockSlice, connections: ActivityDeps['connections']): Promise<CopyChunkResult> {
  const copied = await copyInOneSnapshot(connections, { ...s, sourceName: s.input.source });
  s.metrics?.rowsCopied.inc({ table: tableLabel(s.input.table) }, copied.rows);
  s.metrics?.bytesCopied.inc({ table: tableLabel(s.input.table) }, copied.bytes);
  s.log.info({ rows: copied.rows, bytes: copied.bytes, ms: Date.now() - s.started }, 'table copied in one snapshot');
  return copied;
}

/** Rows a block is taken to hold where the source's statistics do not say (about 130-byte rows). */
const UNKNOWN_ROWS_PER_BLOCK = 60;

/**
 * One slice of a chunk read by blocks (copiesByBlocks: a table without a key, or a large keyed
 * one in full mode): its blocks in batches of about a
 * batch's rows (by the source's rows per block), each batch's rows and its checkpoint — the next
 * block to copy — committed together under the fence, as a keyed batch's are; the chunk's last
 * batch reads to its upper bound, or to the end of the table for the last chunk. Before
 * PostgreSQL 14 (no TID range scans, a range would read the whole table) a batch is the rest of
 * the chunk.
 */
async function copyBlockSlice(s: BlockSlice): Promise<CopyChunkResult> {
  const ctx = Context.current();
  const { input, table, target } = s;
  const layout = await blockLayout(s.source, table.source);
  const rowsPerBlock = layout.rowsPerBlock || UNKNOWN_ROWS_PER_BLOCK;
  // A keyed table is read by blocks only into a target loaded without its key (preflight's
  // copiesByBlocks): with it, a row that a write moved past the copy would stop every retry.
  if (!isKeyless(table) && !s.claimed.done && (await hasUniqueIndexOver(target, table.target, table.keyColumns.map((k) => k.name)))) {
    throw ApplicationFailure.nonRetryable(
      `${displayQualified(table.source)}: the plan reads it by ranges of blocks, which needs its target loaded without its key, but ${displayQualified(table.target)} has it; cancel and start the migration again`,
      FAILURE.IncompatibleTarget,
    );
  }
  const end = input.chunk.upper ? Number(input.chunk.upper[0]) : null;
  let next = s.claimed.lastKey ? Number(s.claimed.lastKey[0]) : input.chunk.lower ? Number(input.chunk.lower[0]) : 0;
  let checkpoint = s.claimed;
  // Sized by bytes (no batchRows): the first batch by the width of rows where it starts.
  const width = input.batchRows === undefined && !checkpoint.done ? await blockWidth(s.source, table, next) : null;
  const size = new BatchSize(input.batchRows, width, input.rowsPerSecond);
  const totals = { rows: 0, bytes: 0, batches: 0 };
  while (!checkpoint.done && (totals.batches === 0 || Date.now() - s.started < input.sliceMs)) {
    if (ctx.cancellationSignal.aborted) throw new CancelledFailure('chunk copy cancelled');
    const span = layout.tidRanges ? Math.max(1, Math.ceil(size.next() / rowsPerBlock)) : Infinity;
    const last = next + span >= (end ?? layout.blocks);
    const until = last ? end : next + span;
    const from = next;
    const stats = await s.write(async () => {
      await target.query('SET LOCAL synchronous_commit = off');
      const copied = await copyBlockRange(s.source, target, table, [from, until], (b) =>
        ctx.heartbeat({ chunk: input.chunk.index, rowsCopied: checkpoint.rowsCopied, bytes: totals.bytes + b }),
      );
      await advanceCheckpoint(target, s.ref, [String(until ?? from)], copied.rows, last);
      return copied;
    });
    totals.rows += stats.rows;
    totals.bytes += stats.bytes;
    totals.batches += 1;
    s.metrics?.rowsCopied.inc({ table: tableLabel(input.table) }, stats.rows);
    s.metrics?.bytesCopied.inc({ table: tableLabel(input.table) }, stats.bytes);
    s.metrics?.batches.inc({ table: tableLabel(input.table) });
    size.record(stats.rows, stats.bytes);
    next = until ?? from;
    checkpoint = { lastKey: [String(next)], rowsCopied: checkpoint.rowsCopied + stats.rows, done: last };
    ctx.heartbeat({ chunk: input.chunk.index, rowsCopied: checkpoint.rowsCopied });
    if (!checkpoint.done) await pace(ctx, input, totals.rows, s.started);
  }
  if (totals.batches > 0) await touchCheckpoint(target, s.ref);
  s.log.info({ ...totals, ms: Date.now() - s.started, done: checkpoint.done }, 'chunk slice copied by blocks');
  return { checkpoint, ...totals };
}

/** Bytes per row, as text, of the rows from block `first` on (copyBlockSlice); null when none. */
async function blockWidth(source: ClientBase, table: CopyTable, first: number): Promise<number | null> {
  const { rows } = await source.query(
    `SELECT avg(octet_length(s::text))::float8 AS width FROM (SELECT ${selectColumns(table)} FROM ${quoteQualified(table.source)}
      WHERE ${blockPredicate(first, null)} LIMIT ${WIDTH_SAMPLE_ROWS}) s`,
  );
  return rows[0].width === null ? null : Number(rows[0].width);
}

/** The chunk's rows after the checkpoint (or from its lower bound), up to its upper bound. */
function remaining(input: CopyChunkInput, lastKey: Key | null): { from: Bound[]; until: Bound[] } {
  const from: Bound[] = lastKey
    ? [{ op: '>', key: lastKey }]
    : input.chunk.lower
      ? [{ op: '>=', key: input.chunk.lower }]
      : [];
  return { from, until: input.chunk.upper ? [{ op: '<', key: input.chunk.upper }] : [] };
}

/**
 * A KeyStride for the chunk where its batches are sized by bytes (a batchRows or a rate cap asks
 * for exact batches) on a single integer key whose column has a histogram, so that the planner's
 * estimate can vouch for each stepped range (without one it guesses a fixed share of the table).
 */
async function strideFor(source: Pool, input: CopyChunkInput): Promise<KeyStride | undefined> {
  // A small table's only chunk (`finish`) takes a batch or two: not worth a round trip.
  if (input.batchRows !== undefined || input.rowsPerSecond || input.finish) return undefined;
  const stride = KeyStride.of(input.table.keyColumns, input.chunk);
  if (!stride) return undefined;
  const { rows } = await source.query(
    `SELECT 1 FROM pg_stats WHERE schemaname = $1 AND tablename = $2 AND attname = $3 AND histogram_bounds IS NOT NULL LIMIT 1`,
    [input.table.source.schema, input.table.source.name, input.table.keyColumns[0].name],
  );
  return rows.length ? stride : undefined;
}

/**
 * The next batch's key range: after the checkpoint (or from the chunk's lower bound) up to the
 * batchRows-th key, or to the chunk's upper bound when fewer rows remain (then `end` is null).
 * With a stride, the end is first stepped to by arithmetic, and kept where the planner expects no
 * more than twice the wanted rows in the range; otherwise it is found by walking the key index.
 */
async function nextBatch(source: Pool, input: CopyChunkInput, lastKey: Key | null, batchRows: number, stride?: KeyStride): Promise<Batch> {
  const { from, until } = remaining(input, lastKey);
  const guess = stride?.endAfter(lastKey, batchRows);
  if (guess) {
    const bounds = guess.end ? [...from, { op: '<=' as const, key: guess.end }] : [...from, ...until];
    if ((await plannedRows(source, input, bounds)) <= batchRows * STRIDE_TOLERANCE) return { bounds, end: guess.end, after: lastKey, wanted: batchRows, stepped: true };
  }
  const binder = new ParamBinder();
  const where = keyPredicate(input.table, [...from, ...until], binder);
  const { rows } = await source.query(
    `SELECT ${keyAsText(input.table)} FROM ${quoteQualified(input.table.source)} WHERE ${where}
      ORDER BY ${keyOrder(input.table)} OFFSET ${batchRows - 1} LIMIT 1`,
    binder.params,
  );
  if (rows.length === 0) return { bounds: [...from, ...until], end: null, after: lastKey, wanted: batchRows, stepped: false };
  const end = keyFromRow(rows[0], input.table);
  return { bounds: [...from, { op: '<=', key: end }], end, after: lastKey, wanted: batchRows, stepped: false };
}

/** The planner's estimate of the rows in a key range (from the key column's histogram). */
async function plannedRows(source: Pool, input: CopyChunkInput, bounds: Bound[]): Promise<number> {
  const where = keyPredicate(input.table, bounds, literalBinder);
  const { rows } = await source.query(`EXPLAIN (FORMAT JSON) SELECT 1 FROM ${quoteQualified(input.table.source)} WHERE ${where}`);
  return Number(rows[0]['QUERY PLAN'][0].Plan['Plan Rows']);
}

/**
 * Bytes per row of the next rows to copy, as text (close to their COPY size, TOASTed values
 * uncompressed — the catalog's sizes are of what is stored, compressed); null when none remain.
 */
async function sampleWidth(source: Pool, input: CopyChunkInput, lastKey: Key | null): Promise<number | null> {
  const { from, until } = remaining(input, lastKey);
  const binder = new ParamBinder();
  const where = keyPredicate(input.table, [...from, ...until], binder);
  const { rows } = await source.query(
    `SELECT avg(octet_length(s::text))::float8 AS width FROM (SELECT ${selectColumns(input.table)} FROM ${quoteQualified(input.table.source)}
      WHERE ${where} ORDER BY ${keyOrder(input.table)} LIMIT ${WIDTH_SAMPLE_ROWS}) s`,
    binder.params,
  );
  return rows[0].width === null ? null : Number(rows[0].width);
}

export interface SmallTablesInput {
  migrationId: string;
  source: string;
  target: string;
  /** Small tables (isSmallTable): one chunk each. */
  tables: TablePlan[];
  batchRows?: number;
  validation: 'none' | 'count' | 'checksum';
  /** The group's fence, taken by each table's chunk in turn. */
  fence: number;
  /** The tables were created without their primary key (it is built once each is loaded). */
  primaryKey: boolean;
  /** Each table's copy rate cap, if any. */
  rowsPerSecond?: number;
}

export interface SmallTableOutcome {
  index: number;
  rows: number;
  bytes: number;
  /** Its key, indexes and ANALYZE done (absent: it turned out larger than a small table, and was only copied). */
  finished?: { built: number; evicted: number };
  /** Source and target summed the same (null: not validated, `validation: none` or not finished). */
  match: boolean | null;
}

/**
 * A group of small tables in one activity (full mode, many tables: workflows/migration/full-load.ts):
 * each one after the other, as its own copy activity would — its chunk claimed with the group's
 * fence, copied, its key, indexes and ANALYZE done — then, under validation, both sides counted
 * and summed whole. What the workflow does per table is then a few lines of its state, not a
 * child workflow and its activities. A retry finds the tables done before (their chunks are) and
 * goes on; a table that differs, or was not small after all, is left for a table workflow of its own.
 */
export function createCopySmallTables(deps: ActivityDeps) {
  const copyChunk = createCopyChunk(deps);
  return async function copySmallTables(input: SmallTablesInput): Promise<{ tables: SmallTableOutcome[] }> {
    const ctx = Context.current();
    const outcomes: SmallTableOutcome[] = [];
    for (const table of input.tables) {
      const copyTable = copyTableOf(table);
      const copied = await copyChunk({
        migrationId: input.migrationId,
        source: input.source,
        target: input.target,
        table: copyTable,
        chunk: table.chunks[0],
        batchRows: input.batchRows,
        fence: input.fence,
        sliceMs: Number.MAX_SAFE_INTEGER,
        ...(input.rowsPerSecond ? { rowsPerSecond: input.rowsPerSecond } : {}),
        finish: { table, primaryKey: input.primaryKey },
      });
      const match = input.validation === 'none' || !copied.finished ? null : await sidesMatch(deps.connections, input, copyTable);
      outcomes.push({ index: table.index, rows: copied.checkpoint.rowsCopied, bytes: copied.bytes, ...(copied.finished ? { finished: copied.finished } : {}), match });
      ctx.heartbeat({ tables: outcomes.length });
    }
    return { tables: outcomes };
  };
}

/** Both sides of a small table counted (and summed) whole, each in one statement. */
async function sidesMatch(connections: ActivityDeps['connections'], input: SmallTablesInput, table: CopyTable): Promise<boolean> {
  const mode = input.validation === 'count' ? 'count' : 'checksum';
  const [theirs, ours] = await Promise.all(
    ([[input.source, table.source], [input.target, table.target]] as const).map(([connection, relation]) =>
      connections.withClient(connection, (db) => wholeSummary(db, table, relation, mode)),
    ),
  );
  return sameSummary(theirs, ours);
}
