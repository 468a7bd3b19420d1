/**
 * The skeleton every activity that writes a table's rows shares (a chunk's copy, the sync, a
 * range repair): a dedicated session on each side, key types from the catalog, the target
 * written as a replica, the chunk's checkpoint row claimed with this attempt's fence token —
 * and every write transaction checking, under the row's lock, that no newer attempt has taken
 * the fence since (docs/architecture.md §5). Sessions are given back reset when the work
 * succeeded (ConnectionRegistry.session), and end when it failed.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { ClientBase } from 'pg';
import { FAILURE } from '../core/failure-types';
import { CopyTable } from '../core/plan';
import { CheckpointRow, ChunkRef, claimChunk, holdsFence } from './bookkeeping';
import { withCatalogKeyTypes } from './catalog';
import { ConnectionRegistry, inTransaction } from './connections';
import { writeAsReplica } from './session';

/** The fence token of an attempt: later dispatches and later attempts always hold bigger ones. */
export function fenceToken(fence: number, attempt: number): number {
  return fence * 1000 + Math.min(attempt, 999);
}

export interface FencedInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  /** Grows with every dispatch; with the attempt number it forms the fence token. */
  fence: number;
}

export interface FencedSessions {
  source: ClientBase;
  target: ClientBase;
  /** The table, its key types read from the source catalog (never the plan's). */
  table: CopyTable;
  /** The checkpoint as committed when this attempt claimed it. */
  claimed: CheckpointRow;
  /** One target transaction, aborted with Superseded when a newer attempt holds the fence. */
  write<T>(fn: () => Promise<T>): Promise<T>;
  /**
   * `count` pairs of sessions for writers that run at the same time (the sync's lanes), the
   * first pair among them, set up as it is. Their transactions hold the fence together (a
   * shared lock on the checkpoint row): a newer attempt's claim waits for all of them, and
   * each checks the fence as `write` does. The further sessions end with the first pair.
   */
  lanes(count: number): Promise<FencedLane[]>;
}

export interface FencedLane {
  source: ClientBase;
  target: ClientBase;
  write<T>(fn: () => Promise<T>): Promise<T>;
}

export function superseded(ref: ChunkRef): ApplicationFailure {
  const what = ref.chunkIndex < 0 ? 'this table\'s sync' : `chunk ${ref.chunkIndex} of table #${ref.tableIndex}`;
  return ApplicationFailure.nonRetryable(`${what} is owned by a newer attempt; this one stops without writing`, FAILURE.Superseded);
}

/** Runs `fn` with fenced sessions on chunk `chunkIndex` of the input's table (−1: its sync). */
export async function withFencedSessions<T>(
  connections: ConnectionRegistry,
  input: FencedInput,
  chunkIndex: number,
  fn: (sessions: FencedSessions) => Promise<T>,
  options: { statementTimeoutMs?: number } = {},
): Promise<T> {
  const { attempt, activityId } = Context.current().info;
  const token = fenceToken(input.fence, attempt);
  const ref: ChunkRef = { migrationId: input.migrationId, tableIndex: input.table.index, chunkIndex };
  const timeouts = options.statementTimeoutMs === undefined ? undefined : { statementTimeoutMs: options.statementTimeoutMs };
  const group = connections.sessionGroup(timeouts);
  const fencedWrite =
    (t: ClientBase, lock: 'update' | 'share') =>
    <R>(work: () => Promise<R>) =>
      inTransaction(t, async () => {
        if (!(await holdsFence(t, ref, token, lock))) throw superseded(ref);
        return work();
      });
  const pair = async () => {
    const [source, target] = await group.take([input.source, input.target]);
    return { source, target };
  };
  // Given back for the next activity (reset), or ended when anything failed.
  return group.run(async () => {
    const first = await pair();
    const { source, target } = first;
    const table = await withCatalogKeyTypes(source, input.table);
    await writeAsReplica(target);
    const claimed = await claimChunk(target, ref, token, `${activityId}#${attempt}`);
    if (!claimed) throw superseded(ref);
    const lanes = async (count: number): Promise<FencedLane[]> => {
      const pairs = [first];
      while (pairs.length < count) {
        const more = await pair();
        await writeAsReplica(more.target);
        pairs.push(more);
      }
      return pairs.map((p) => ({ ...p, write: fencedWrite(p.target, 'share') }));
    };
    return fn({ source, target, table, claimed, write: fencedWrite(target, 'update'), lanes });
  });
}
