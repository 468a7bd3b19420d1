/**
 * The steps of an online move of a table without a key (the SQL is in keyless-ops.ts): its copy
 * in one snapshot at a known position, its sync from the log of row images, and its comparison at
 * a position. copyChunk and syncChanges run the first two for such a table, as for any other;
 * the comparison is validateAtPosition's.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { advanceCheckpoint, ChunkRef, SYNC_CHUNK } from './bookkeeping';
import { quotedLog } from './capture-sql';
import { logLag, POLL_MS, vacuumLogWhenDue } from './change-log';
import { ConnectionRegistry } from './connections';
import { copyStream, selectColumns } from './copy-stream';
import { FencedSessions, withFencedSessions } from './fenced';
import { applyOps, copiedAt, readOps, retireOps, snapshotAtPosition, Watermark, watermarkOf } from './keyless-ops';
import { awaitConfirmed } from './logical-sql';
import { RangeSummary, sameSummary, wholeSummary } from './summaries';
import { displayQualified, quoteQualified } from '../core/identifiers';
import type { ChunkCheckpoint, CopyTable } from '../core/plan';
import { FAILURE } from '../core/failure-types';

/** Changes applied per round, and how long the consumer may take to reach a validation's position. */
const ROUND_OPS = 5_000;
const CAPTURE_WAIT_MS = 60_000;

/**
 * The whole table copied in one source snapshot at a known position (snapshotAtPosition), into
 * the target in one transaction that also records the position as the table's watermark: a
 * retry finds either nothing copied or everything, and copies again from the start. The copy
 * is one activity, whatever its length: its snapshot cannot outlive it.
 */
export async function copyInOneSnapshot(
  connections: ConnectionRegistry,
  s: Pick<FencedSessions, 'source' | 'target' | 'table' | 'claimed' | 'write'> & { ref: ChunkRef; sourceName: string },
): Promise<{ checkpoint: ChunkCheckpoint; rows: number; bytes: number; batches: number }> {
  if (s.claimed.done) return { checkpoint: s.claimed, rows: 0, bytes: 0, batches: 0 };
  const ctx = Context.current();
  const { table, target } = s;
  const copied = await s.write(async () => {
    // One statement reads the whole table: it takes as long as it takes (heartbeats run meanwhile).
    await target.query('SET LOCAL statement_timeout = 0');
    await target.query(`DELETE FROM ${quoteQualified(table.target)}`);
    const position = await connections.withClient(s.sourceName, (locker) => snapshotAtPosition(locker, s.source, table.source));
    try {
      await s.source.query('SET LOCAL statement_timeout = 0');
      const stats = await copyStream(s.source, target, table, `SELECT ${selectColumns(table)} FROM ${quoteQualified(table.source)}`, (bytes) =>
        ctx.heartbeat({ chunk: s.ref.chunkIndex, rowsCopied: 0, bytes }),
      );
      await advanceCheckpoint(target, s.ref, null, stats.rows, true);
      await advanceCheckpoint(target, { ...s.ref, chunkIndex: SYNC_CHUNK }, copiedAt(position), 0, false);
      return stats;
    } finally {
      await s.source.query('COMMIT');
    }
  });
  return { checkpoint: { lastKey: null, rowsCopied: copied.rows, done: true }, rows: copied.rows, bytes: copied.bytes, batches: 1 };
}

/** What a slice of the sync of a table without a key is given (of SyncInput) and returns (a SyncResult). */
export interface KeylessSlice {
  migrationId: string;
  sliceMs: number;
  returnWhenCaughtUp: boolean;
}

export interface KeylessSliceResult {
  applied: number;
  rounds: number;
  caughtUp: boolean;
  pending: number;
  lagSeconds: number;
}

/**
 * Rounds of the table's changes until the slice is over (or, returnWhenCaughtUp, until none is
 * left to apply): each round's net effect and the new watermark in one fenced target
 * transaction, then the log's changes up to the watermark deleted. With `until`, only changes
 * committed before that position (validation's).
 */
export async function syncKeylessSlice(input: KeylessSlice, sessions: Pick<FencedSessions, 'source' | 'target' | 'table' | 'claimed' | 'write'>, until?: string): Promise<KeylessSliceResult> {
  const ctx = Context.current();
  const { source, target, table } = sessions;
  const log = quotedLog(input.migrationId, table.index);
  const ref: ChunkRef = { migrationId: input.migrationId, tableIndex: table.index, chunkIndex: SYNC_CHUNK };
  let mark: Watermark | null = watermarkOf(sessions.claimed.lastKey);
  if (!mark) {
    throw ApplicationFailure.nonRetryable(
      `${displayQualified(table.source)}: its copy recorded no position, so which changes it holds is unknown; cancel and start the migration again`,
      FAILURE.ConsistencyBreach,
    );
  }
  const started = Date.now();
  let applied = 0;
  let rounds = 0;
  let caughtUp = false;
  let deleted = await retireOps(source, log, mark);
  while (Date.now() - started < input.sliceMs) {
    if (ctx.cancellationSignal.aborted) throw new CancelledFailure('sync slice cancelled');
    if (caughtUp) {
      if (input.returnWhenCaughtUp) break;
      ctx.heartbeat({ applied });
      await ctx.sleep(POLL_MS);
    }
    const ops = await readOps(source, log, input.migrationId, mark, ROUND_OPS, until);
    if (ops.length === 0) {
      caughtUp = true;
      continue;
    }
    const last = ops[ops.length - 1];
    const next: Watermark = { lsn: last.lsn, seq: last.seq };
    await sessions.write(async () => {
      await applyOps(target, table, ops);
      await advanceCheckpoint(target, ref, [next.lsn, String(next.seq)], 0, false);
    });
    mark = next;
    applied += ops.length;
    rounds += 1;
    ctx.heartbeat({ applied });
    deleted = await vacuumLogWhenDue(source, log, deleted + (await retireOps(source, log, mark)));
    caughtUp = ops.length < ROUND_OPS / 2;
  }
  return { applied, rounds, caughtUp, ...(await logLag(source, log)) };
}

export interface ValidateAtPositionInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  /** The table's sync fence: validation applies the changes up to its position itself. */
  fence: number;
  mode: 'count' | 'checksum';
}

export interface ValidateAtPositionResult {
  match: boolean;
  position: string;
  source: RangeSummary;
  target: RangeSummary;
}

/**
 * A table without a key compared whole at one position: a source snapshot at a known position
 * (snapshotAtPosition), the consumer waited for until it wrote every change committed before
 * it, the target brought to exactly that position (the changes before it applied, none after:
 * the table's sync is held by this fence), then both sides counted and checksummed. Nothing
 * narrows a difference, so the workflow fails the table on one.
 */
export async function compareAtPosition(connections: ConnectionRegistry, input: ValidateAtPositionInput): Promise<ValidateAtPositionResult> {
  const ctx = Context.current();
  return withFencedSessions(
    connections,
    input,
    SYNC_CHUNK,
    (sessions) =>
      connections.withClient(input.source, async (pooled) => {
        const position = await snapshotAtPosition(pooled, sessions.source, sessions.table.source);
        try {
          await awaitConfirmed(pooled, input.migrationId, CAPTURE_WAIT_MS, () => ctx.heartbeat());
          await syncKeylessSlice({ migrationId: input.migrationId, sliceMs: Number.MAX_SAFE_INTEGER, returnWhenCaughtUp: true }, { ...sessions, source: pooled }, position);
          const theirs = await wholeSummary(sessions.source, sessions.table, sessions.table.source, input.mode);
          const ours = await wholeSummary(sessions.target, sessions.table, sessions.table.target, input.mode);
          return { match: sameSummary(theirs, ours), position, source: theirs, target: ours };
        } finally {
          await sessions.source.query('COMMIT');
        }
      }),
    { statementTimeoutMs: 0 },
  );
}
