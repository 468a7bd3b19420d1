/**
 * validateChunk: count plus an order-independent checksum of a key range, source and target in
 * parallel. The checksum is the sum of a 64-bit hash (hashtextextended) of each row's text form
 * (an explicit column list, pinned session settings), so it is stable across PostgreSQL versions.
 * A mismatch is narrowed by bisecting the range until the differing pieces are small.
 *
 * repairRange: re-copies one narrowed range in one fenced target transaction.
 */
import { Context } from '@temporalio/activity';
import { Client, ClientBase } from 'pg';
import { ConnectionRegistry, inTransaction } from '../src/db/connections';
import { withCatalogKeyTypes } from '../src/db/catalog';
import { copyRange, deleteRange } from '../src/db/copy-stream';
import { withFencedSessions } from '../src/db/fenced';
import type { CopyTable } from '../src/core/plan';
import { distinctKeys, keyAsText, keyFromRow, keyInList, keyOrder, keyPredicate, ParamBinder, rangeBounds } from '../src/db/ranges';
import { quotedLog } from '../src/db/capture-sql';
import { awaitConfirmed, isLogical } from '../src/db/logical-sql';
import { displayQualified, QualifiedName, quoteQualified } from '../src/core/identifiers';
import { Key, KeyRange } from '../src/core/plan';
import { blockShareSql, RangeSummary, sameSummary, summarySql } from '../src/db/summaries';
import { compareAtPosition, ValidateAtPositionInput, ValidateAtPositionResult } from '../src/db/keyless-sync';
import { sameKey } from '../src/core/chunks';
import { ActivityDeps, tableLabel } from './deps';

export interface ValidateChunkInput {
  source: string;
  target: string;
  table: CopyTable;
  range: KeyRange;
  mode: 'count' | 'checksum';
  /** Stop bisecting below this many rows. */
  leafRows?: number;
  /** More differing pieces than this are reported as the whole range. */
  maxRanges?: number;
  /** Only say whether the range matches: no narrowing (the caller compares smaller ranges next). */
  compareOnly?: boolean;
  /**
   * Online mode (source live, sync paused): compare in one source snapshot, leaving out the keys
   * waiting in the table's change log then — sync applies them later and they join the dirty set.
   */
  live?: { migrationId: string };
}


export interface ValidateChunkResult {
  match: boolean;
  sourceRows: number;
  targetRows: number;
  mismatches: KeyRange[];
  /** Keys left out because they were waiting in the change log (online mode). */
  excluded: number;
}

export interface RepairRangeInput {
  migrationId: string;
  source: string;
  target: string;
  table: CopyTable;
  chunkIndex: number;
  range: KeyRange;
  fence: number;
}


async function summarise(
  db: Client,
  table: CopyTable,
  relation: QualifiedName,
  range: KeyRange,
  mode: 'count' | 'checksum',
  exclude: Key[],
): Promise<RangeSummary> {
  const binder = new ParamBinder();
  let where = keyPredicate(table, rangeBounds(range), binder);
  if (exclude.length > 0) where += ` AND NOT (${keyInList(table, exclude, binder)})`;
  const { rows } = await db.query(summarySql(table, relation, where, mode), binder.params);
  return { rows: Number(rows[0].rows), sum: rows[0].sum };
}

export function createValidateChunk({ connections, metrics }: ActivityDeps) {
  return async function validateChunk(input: ValidateChunkInput): Promise<ValidateChunkResult> {
    const result = await compareRange(connections, input);
    if (result.mismatches.length > 0) metrics?.validationMismatches.inc({ table: tableLabel(input.table) }, result.mismatches.length);
    return result;
  };
}

async function compareRange(connections: ActivityDeps['connections'], input: ValidateChunkInput): Promise<ValidateChunkResult> {
  const ctx = Context.current();
  const limits = { leafRows: input.leafRows ?? 1000, maxRanges: input.maxRanges ?? 64 };
  // A range's scan takes as long as it takes (liveness heartbeats run meanwhile); the
  // statement timeout of ordinary sessions would fail a large one.
  const unbounded = { statementTimeoutMs: 0 };
  return connections.withSessions([input.source, input.target], unbounded, async (source, target) => {
    input = { ...input, table: await withCatalogKeyTypes(source, input.table) }; // types from the catalog, not the plan
    const logical = input.live ? await isLogical(source, input.live.migrationId) : false;
    const comparison = new RangeComparison(connections, ctx, input, source, target, logical, limits);
    const [s, t] = await comparison.compare(input.range);
    if (sameSummary(s, t)) return { match: true, sourceRows: s.rows, targetRows: t.rows, mismatches: [], excluded: comparison.excluded };
    if (input.compareOnly) return { match: false, sourceRows: s.rows, targetRows: t.rows, mismatches: [], excluded: comparison.excluded };
    const mismatches = await comparison.narrow(input.range, s, t);
    const tooMany = mismatches.length >= limits.maxRanges;
    return { match: false, sourceRows: s.rows, targetRows: t.rows, mismatches: tooMany ? [input.range] : mismatches, excluded: comparison.excluded };
  });
}

/** One validation's two sessions: a range's summaries on both sides, and the bisection of a mismatch. */
class RangeComparison {
  /** The most keys one comparison left out for waiting in the change log (online mode). */
  excluded = 0;

  constructor(
    private readonly connections: ConnectionRegistry,
    private readonly ctx: Context,
    private readonly input: ValidateChunkInput,
    private readonly source: Client,
    private readonly target: Client,
    private readonly logical: boolean,
    private readonly limits: { leafRows: number; maxRanges: number },
  ) {}

  /** Source and target summaries of a range. */
  async compare(range: KeyRange): Promise<[RangeSummary, RangeSummary]> {
    this.ctx.heartbeat();
    const { table, mode, live } = this.input;
    if (!live) return Promise.all([summarise(this.source, table, table.source, range, mode, []), summarise(this.target, table, table.target, range, mode, [])]);
    // Online: one short snapshot per range, starting with the log read, so "waiting" and
    // "compared" cannot overlap — and no snapshot lives through the whole bisection (it
    // would hold back vacuum on a hot table).
    const [exclude, sourceSummary] = await inTransaction(this.source, async () => {
      await this.source.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const waiting = await this.waitingKeys(live.migrationId);
      return [waiting, await summarise(this.source, table, table.source, range, mode, waiting)] as const;
    });
    this.excluded = Math.max(this.excluded, exclude.length);
    return [sourceSummary, await summarise(this.target, table, table.target, range, mode, exclude)];
  }

  /** The keys waiting in the table's change log, as of the source transaction just begun. */
  private async waitingKeys(migrationId: string): Promise<Key[]> {
    const log = quotedLog(migrationId, this.input.table.index);
    const readLog = async (db: ClientBase) => distinctKeys((await db.query(`SELECT pk FROM ${log}`)).rows.map((r) => r.pk as Key));
    if (!this.logical) return readLog(this.source);
    // The consumer lags behind the commits: the snapshot first, then a mark after it; once
    // the consumer is past the mark, every change the snapshot sees and the target lacks
    // has its key in the log (read now, outside the snapshot; the table's sync is paused).
    await this.source.query('SELECT 1');
    return this.connections.withClient(this.input.source, async (db) => {
      await awaitConfirmed(db, migrationId, 60_000, () => this.ctx.heartbeat());
      return readLog(db);
    });
  }

  /** The differing pieces of a range: bisected at the median key of the fuller side until they are small. */
  async narrow(range: KeyRange, a: RangeSummary, b: RangeSummary, depth = 0, mismatches: KeyRange[] = []): Promise<KeyRange[]> {
    if (sameSummary(a, b)) return mismatches;
    if (Math.max(a.rows, b.rows) <= this.limits.leafRows || depth >= 32 || mismatches.length >= this.limits.maxRanges) {
      mismatches.push(range);
      return mismatches;
    }
    const mid = await this.medianKey(range, a, b);
    if (!mid || (range.lower && sameKey(mid, range.lower))) {
      mismatches.push(range);
      return mismatches;
    }
    const halves: KeyRange[] = [
      { lower: range.lower, upper: mid },
      { lower: mid, upper: range.upper },
    ];
    for (const half of halves) {
      const [hs, ht] = await this.compare(half);
      await this.narrow(half, hs, ht, depth + 1, mismatches);
    }
    return mismatches;
  }

  /** The median key of the range on the side with more rows; null when that side has none. */
  private async medianKey(range: KeyRange, a: RangeSummary, b: RangeSummary): Promise<Key | null> {
    const { table } = this.input;
    const fuller = a.rows >= b.rows ? { db: this.source, name: table.source, rows: a.rows } : { db: this.target, name: table.target, rows: b.rows };
    const binder = new ParamBinder();
    const where = keyPredicate(table, rangeBounds(range), binder);
    const { rows } = await fuller.db.query(
      `SELECT ${keyAsText(table)} FROM ${quoteQualified(fuller.name)} WHERE ${where}
        ORDER BY ${keyOrder(table)} OFFSET ${Math.floor(fuller.rows / 2)} LIMIT 1`,
      binder.params,
    );
    return rows.length ? keyFromRow(rows[0], table) : null;
  }
}

export interface ChecksumBlocksInput {
  /** The connection name of the side to read (the migration's source or target). */
  connection: string;
  /** The relation on that side (the table's source or target name). */
  relation: QualifiedName;
  table: CopyTable;
  mode: 'count' | 'checksum';
  /** This unit's place among `units`: it reads the unit-th share of the relation's blocks. */
  unit: number;
  units: number;
}

export interface ChecksumBlocksResult extends RangeSummary {
  /** The blocks read, [first, last) (last null: to the end); null when the relation is not split (unit 0 read all of it, the others nothing). */
  blocks: [number, number | null] | null;
}


/** Which blocks a unit reads; null: the whole relation (unit 0 only), undefined: nothing. */
export function blockShare(totalBlocks: number, unit: number, units: number, splittable: boolean): [number, number | null] | null | undefined {
  if (!splittable || units <= 1) return unit === 0 ? null : undefined;
  const first = Math.floor((unit * totalBlocks) / units);
  return [first, unit === units - 1 ? null : Math.floor(((unit + 1) * totalBlocks) / units)];
}

export function createChecksumBlocks({ connections }: ActivityDeps) {
  return async function checksumBlocks(input: ChecksumBlocksInput): Promise<ChecksumBlocksResult> {
    // As validateChunk: a scan takes as long as it takes, liveness heartbeats run meanwhile.
    return connections.withSessions([input.connection], { statementTimeoutMs: 0 }, async (db) => {
      const { rows } = await db.query(
        `SELECT c.relkind = 'r' AND current_setting('server_version_num')::int >= 140000 AS splittable,
                pg_catalog.pg_relation_size(c.oid) / current_setting('block_size')::int8 AS blocks
           FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`,
        [quoteQualified(input.relation)],
      );
      const blocks = blockShare(Number(rows[0].blocks), input.unit, input.units, rows[0].splittable);
      if (blocks === undefined) return { rows: 0, sum: '0', blocks: null };
      // A share is one process's scan: PostgreSQL's parallel workers would read the whole table
      // to filter it. The whole relation (one share) may use them.
      const summary = await inTransaction(db, async () => {
        if (blocks !== null) await db.query('SET LOCAL max_parallel_workers_per_gather = 0');
        const { rows: [row] } = await db.query(blockShareSql(input.table, input.relation, input.mode, blocks));
        return { rows: Number(row.rows), sum: input.mode === 'count' ? '0' : row.sum };
      });
      return { ...summary, blocks };
    });
  };
}

export function createRepairRange({ connections, logger }: ActivityDeps) {
  return async function repairRange(input: RepairRangeInput): Promise<{ deleted: number; copied: number }> {
    const ctx = Context.current();
    // Taking the chunk's fence also stops any zombie copy of it from writing after the repair.
    return await withFencedSessions(connections, input, input.chunkIndex, async ({ source, target, table, write }) => {
      const bounds = rangeBounds(input.range);
      const result = await write(async () => {
        const deleted = await deleteRange(target, table, bounds);
        const copied = await copyRange(source, target, table, bounds, () => ctx.heartbeat());
        return { deleted, copied: copied.rows };
      });
      logger.info({ migrationId: input.migrationId, table: displayQualified(table.source), chunk: input.chunkIndex, ...result }, 'range repaired');
      return result;
    });
  };
}

export type { ValidateAtPositionInput, ValidateAtPositionResult };

/** Online, a table without a key: both sides compared whole at one position of the source (src/db/keyless-sync.ts). */
export function createValidateAtPosition({ connections }: ActivityDeps) {
  return async function validateAtPosition(input: ValidateAtPositionInput): Promise<ValidateAtPositionResult> {
    return compareAtPosition(connections, input);
  };
}
