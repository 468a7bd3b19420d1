/**
 * tableMigrationWorkflow: one table, the per-table phase machine (docs/architecture.md §2).
 *   full:   PENDING → FULL_MIGRATING → FULL_DONE → VALIDATING → COMPLETED
 *   online: PENDING → FULL_MIGRATING → FULL_DONE → INCR_SYNCING ⇄ VALIDATING … until the parent
 *           asks it to finish at cutover (the parent then drains the last changes itself).
 * Chunks copy in parallel as short activity slices; milestones go to the parent, which owns
 * the event sequence. Long loops continue as new before the history grows large.
 */
import { allHandlersFinished, ApplicationFailure, CancellationScope, condition, continueAsNew, ExternalWorkflowHandle, getExternalWorkflowHandle, setHandler, workflowInfo } from '@temporalio/workflow';
import type { SyncInput, SyncResult } from '../../src/core/sync-types';
import { innermostApplicationFailure } from '../../src/core/failures';
import { displayQualified } from '../../src/core/identifiers';
import { ChunkCheckpoint, CopyTable, copyTableOf, isKeyless, isSmallTable, KeyRange, TablePlan } from '../../src/core/plan';
import { chunkRateCap } from '../../src/core/rate';
import { Phase, phaseMachine, StateMachine, Transition } from '../../src/core/state-machine';
import { ChunkStatus, EventType, TableStatus } from '../../src/core/status';
import { VALIDATION_UNIT_ROWS } from '../../src/core/chunks';
import { runBounded } from './bounded';
import { Slices } from './slices';
import { Control, controlSignal, finishSyncSignal, startCopySignal, TableProgress, tableProgressSignal, tableStateQuery } from '../definitions';
import { buildPrimaryKey, buildTableIndexes, listSourceIndexes } from './table-indexes';
import type { IndexRef } from '../../activities/indexes';
import { FAILURE } from '../../src/core/failure-types';
import { Timings, TimingsInput, timingsOf } from '../../src/core/timings';
import { tableActivities } from '../activity-options';
import { flags } from '../patches';

export const SLICE_MS = 15_000;
export const MAX_REPAIR_ROUNDS = 3;
/** Online: pause between sync slices when the log was empty. */
export const IDLE_POLL_MS = 500;
/**
 * How long a busy table's sync activity keeps polling before it returns (SyncInput.busyDwellMs):
 * long enough that its activity, sessions and fence are a small cost beside its rounds, short
 * enough that a pause or a dirty re-check waits little behind it.
 */
export const BUSY_DWELL_MS = 5_000;
/**
 * A ready table's busy slice that waited longer than this for a worker slot does not dwell
 * (SyncInput.crowdedAfterMs), and the table pauses off the slot before its next slice: from
 * BUSY_DWELL_MS, doubling up to timings.maxIdleMs while its slices keep finding the slots crowded.
 */
export const CROWDED_AFTER_MS = 1_000;
/**
 * Online, the longest wait of an idle table between looks at its change log in executions begun
 * before PATCHES.quietIdleTables; later ones wait up to timings.maxIdleMs. Any write found
 * brings it back to IDLE_POLL_MS; the cutover's finish request ends the wait at once.
 */
const LEGACY_MAX_IDLE_MS = 8_000;
/** Full mode: tables of up to this many estimated rows are validated whole first, one share per side (validateFull). */
const WHOLE_TABLE_VALIDATION_ROWS = 4_000_000;
/** Online: report lag to the parent at least this often (each report is a history event there). */
export const LAG_REPORT_MS = 10_000;
export const SYNC_BATCH_KEYS = 5_000;

export interface TableWorkflowInput {
  migrationId: string;
  parentWorkflowId: string;
  mode: 'full' | 'online';
  source: string;
  target: string;
  table: TablePlan;
  /** Absent: the copy sizes its batches by bytes. */
  batchRows?: number;
  validation: 'none' | 'count' | 'checksum';
  chunkParallelism: number;
  control: Control;
  /** Wait for the parent's startCopy signal (online mode bounds how many tables copy at once). */
  waitForCopySlot: boolean;
  /** Continue as new after this many history events (Temporal also suggests it). */
  historyLimit?: number;
  /** Shorter waits than production's (src/core/timings.ts), as the parent was given them; absent, production's. */
  timings?: TimingsInput;
  /**
   * Build the table's target indexes once it is loaded and validated (absent in executions
   * begun by an older Ferry, whose parent built every index at the end).
   */
  indexes?: { parallelism: number };
  /** The table was created without its primary key: build it once loaded, before anything reads by key. */
  primaryKeyAfterLoad?: boolean;
  /** The parent marked the table FULL_MIGRATING when it started it: no signal for that (PATCHES.parentMarksCopying). */
  copyingMarkedByParent?: boolean;
  /** Online: sessions applying the table's changes at once (`parallelism.apply`; absent: one). */
  applyLanes?: number;
  /**
   * Re-check dirty keys under the table's sync fence, so that the cutover's drain, once it has
   * taken the fence, cannot meet a re-check still writing (PATCHES.sealedDrain).
   */
  fencedRecheck?: boolean;
  /** Carried across continue-as-new. */
  carried?: Carried;
}

interface Carried {
  phase: Phase;
  transitions: Transition<Phase>[];
  chunks: ChunkState[];
  copyAllowed: boolean;
  sync: SyncState;
  repairedRanges: number;
}

export interface ChunkState {
  status: ChunkStatus;
  /** The last fence handed out for this chunk; every dispatch takes a bigger one. */
  fence: number;
}

interface SyncState {
  fence: number;
  /** Keys applied from the change log so far. */
  applied: number;
  validationBegun: boolean;
  validated: boolean;
  validationRounds: number;
  caughtUpReported: boolean;
  lastRecheckAt: number;
  lastLagReportAt: number;
  indexesBuilt?: boolean;
  /** The last slice's view of the change log (the tableState query). */
  lag?: TableStatus['lag'];
  /** The current wait between looks at an idle log. */
  idleMs?: number;
  /**
   * Keys were recorded dirty since the last re-check (or it is not known: absent counts as
   * yes). The dirty set only grows through applies, so a table with none skips the re-check.
   */
  dirtySinceRecheck?: boolean;
}

export interface TableWorkflowResult {
  rowsCopied: number;
  repairedRanges: number;
  /** Milestones held back for the parent to apply, in order (PATCHES.smallTableReportsInResult). */
  reports?: Omit<TableProgress, 'tableIndex'>[];
}

export async function tableMigrationWorkflow(input: TableWorkflowInput): Promise<TableWorkflowResult> {
  return new TableRun(input).run();
}

/**
 * One table's run: its state in fields, its phases as methods. The order of the commands it
 * issues is what recorded histories replay against: reorder nothing without patched().
 */
class TableRun {
  /** Executions begun before it pushed every slice's progress and the lag to the parent. */
  private readonly progressByQuery = flags.progressByQuery;
  /** Executions begun before milestones were batched sent each in a signal of its own. */
  private readonly batchedReports = flags.batchedReports;
  /** The last chunk's report, held to go with FULL_DONE and TableCopied (batchedReports). */
  private lastChunkReport?: Omit<TableProgress, 'tableIndex'>;
  /** The source's indexes, listed while the primary key was built (batchedReports). */
  private listedIndexes?: IndexRef[];
  /**
   * Milestones held for the result instead of signalled (a small table in full mode,
   * PATCHES.smallTableReportsInResult); undefined: each is signalled. Decided at the first one.
   */
  private held?: Omit<TableProgress, 'tableIndex'>[];
  private holdDecided = false;
  /** A small table's indexes, built by its copy (finishesInCopy), for the IndexesBuilt event. */
  private builtInCopy?: { built: number; evicted: number };
  private readonly table: TablePlan;
  private readonly copyTable: CopyTable;
  private readonly label: string;
  private readonly machine: StateMachine<Phase>;
  private readonly chunks: ChunkState[];
  private readonly sync: SyncState;
  private readonly slices = new Slices();
  private readonly parent: ExternalWorkflowHandle;
  private readonly timings: Timings;
  private readonly acts: ReturnType<typeof tableActivities>;
  private repairedRanges: number;
  private control: Control;
  private copyAllowed: boolean;
  private finishRequested = false;
  /** Control changed since the idle wait began (it ends the wait: a resume acts at once). */
  private controlChanged = false;

  constructor(private readonly input: TableWorkflowInput) {
    const carried = input.carried;
    this.timings = timingsOf(input.timings);
    this.acts = tableActivities(this.timings);
    this.table = input.table;
    this.copyTable = copyTableOf(input.table);
    this.label = displayQualified(input.table.source);
    this.machine = phaseMachine(carried?.phase ?? 'PENDING', carried?.transitions);
    this.chunks = carried?.chunks ?? input.table.chunks.map(() => ({ status: { state: 'PENDING', rowsCopied: 0, checkpoint: null }, fence: 0 }));
    this.sync = carried?.sync ?? {
      fence: 0,
      applied: 0,
      validationBegun: false,
      validated: false,
      validationRounds: 0,
      caughtUpReported: false,
      lastRecheckAt: 0,
      lastLagReportAt: 0,
    };
    this.repairedRanges = carried?.repairedRanges ?? 0;
    this.control = input.control;
    this.copyAllowed = carried?.copyAllowed ?? !input.waitForCopySlot;
    this.parent = getExternalWorkflowHandle(input.parentWorkflowId);
    this.listen();
  }

  private listen(): void {
    setHandler(controlSignal, (c) => {
      // Signals can arrive out of order: one older than the control held is stale.
      if (c.seq !== undefined && this.control.seq !== undefined && c.seq < this.control.seq) return;
      this.control = c;
      this.controlChanged = true;
      // Executions begun before control changes interrupted copy slices too: there, only a pause
      // stopped a running sync slice (replaying their histories must issue the same commands).
      if (flags.interruptSlicesOnControl) this.slices.interrupt(['copy', 'sync']);
      else if (c.paused) this.slices.interrupt(['sync']);
    });
    setHandler(startCopySignal, () => {
      this.copyAllowed = true;
    });
    setHandler(finishSyncSignal, () => {
      this.finishRequested = true;
      this.slices.interrupt(['copy', 'sync']);
    });
    setHandler(tableStateQuery, () => ({
      phase: this.machine.state,
      rowsCopied: this.rowsCopied(),
      chunks: this.chunks.map((c) => c.status),
      lag: this.sync.lag,
      paused: this.control.paused,
    }));
  }

  async run(): Promise<TableWorkflowResult> {
    try {
      const result = await this.phases();
      return this.held?.length ? { ...result, reports: this.held } : result;
    } catch (err) {
      // A table that fails sends what it held first: the parent tells the story in order.
      await this.sendHeld();
      throw err;
    }
  }

  private async phases(): Promise<TableWorkflowResult> {
    if (this.machine.state === 'PENDING') {
      await condition(() => this.copyAllowed);
      if (this.input.copyingMarkedByParent) this.machine.to('FULL_MIGRATING', new Date().toISOString());
      else await this.move('FULL_MIGRATING');
    }
    if (this.machine.state === 'FULL_MIGRATING') {
      await runBounded(
        this.chunks.map((_, i) => i),
        this.input.chunkParallelism,
        (i) => this.copyChunk(i),
      );
      if (this.chunks.some((c) => c.status.state !== 'DONE')) return this.carryOn();
      await this.copied();
    }
    // (A small table's copy built its key with its indexes: sync.indexesBuilt.)
    if (this.machine.state === 'FULL_DONE' && this.input.primaryKeyAfterLoad && !this.sync.indexesBuilt) {
      if (this.batchedReports && this.input.mode === 'full' && this.input.indexes && !this.sync.indexesBuilt) {
        [, this.listedIndexes] = await Promise.all([buildPrimaryKey(this.input), listSourceIndexes(this.input)]);
      } else {
        await buildPrimaryKey(this.input);
      }
    }
    if (this.input.mode === 'full') return this.finishFull();
    return this.syncUntilCutover();
  }

  // ── copy ────────────────────────────────────────────────────────────────────────────────

  /** Slices of one chunk until it is done (or the history is full: the next run goes on). */
  private async copyChunk(i: number): Promise<void> {
    const chunk = this.chunks[i];
    while (chunk.status.state !== 'DONE') {
      await condition(() => !this.control.paused);
      if (this.historyFull()) return;
      chunk.status.state = 'COPYING';
      const notDone = this.chunks.filter((c) => c.status.state !== 'DONE').length;
      // A table read whole in one snapshot (online, without a key) is one activity however long.
      const acts = this.table.copyBy === 'snapshot' ? this.acts.build : this.acts.copy;
      const result = await this.slices.run('copy', () =>
        acts.copyChunk({
          migrationId: this.input.migrationId,
          source: this.input.source,
          target: this.input.target,
          table: this.copyTable,
          chunk: this.table.chunks[i],
          batchRows: this.control.batchRows ?? this.input.batchRows,
          fence: nextFence(chunk),
          sliceMs: SLICE_MS,
          rowsPerSecond: chunkRateCap(this.control, this.input.chunkParallelism, notDone),
          ...(this.finishesInCopy() ? { finish: { table: this.table, primaryKey: this.input.primaryKeyAfterLoad === true } } : {}),
        }),
      );
      if (!result) continue; // interrupted: the next slice runs under the new control
      chunk.status = statusOf(result.checkpoint);
      if (result.finished) {
        this.sync.indexesBuilt = true;
        this.builtInCopy = result.finished;
      }
      if (this.progressByQuery && !result.checkpoint.done) continue; // the tableState query shows it
      const report = {
        chunk: { index: i, ...chunk.status },
        event: { type: 'SliceMigrated' as const, detail: { chunk: i, rows: result.rows, bytes: result.bytes, done: result.checkpoint.done } },
      };
      if (this.batchedReports && this.chunks.every((c) => c.status.state === 'DONE')) this.lastChunkReport = report;
      else await this.report(report);
    }
  }

  /**
   * A small table in full mode (isSmallTable) has its primary key, indexes and ANALYZE done by
   * its copy activity, once the chunk is done: one activity instead of three to five, each a
   * round trip through Temporal that for a few thousand rows costs more than the work
   * (PATCHES.smallTableInOneStep).
   */
  private finishesInCopy(): boolean {
    return this.input.mode === 'full' && this.input.indexes !== undefined && this.batchedReports && isSmallTable(this.table) && flags.smallTableInOneStep;
  }

  /** Every chunk copied: FULL_DONE and TableCopied (with the last chunk's report, in one signal). */
  private async copied(): Promise<void> {
    if (!this.batchedReports) {
      await this.move('FULL_DONE');
      await this.event('TableCopied', { rows: this.rowsCopied() });
      return;
    }
    const last = this.lastChunkReport;
    this.lastChunkReport = undefined;
    await this.move('FULL_DONE', undefined, {
      ...(last?.chunk ? { chunk: last.chunk } : {}),
      events: [...(last?.event ? [last.event] : []), { type: 'TableCopied', detail: { rows: this.rowsCopied() } }],
    });
  }

  // ── full mode ───────────────────────────────────────────────────────────────────────────

  private async finishFull(): Promise<TableWorkflowResult> {
    if (this.machine.state === 'FULL_DONE' && this.input.validation !== 'none') {
      await this.move('VALIDATING');
      this.repairedRanges = await this.validateFull();
      await this.event('ValidationPassed', { mode: this.input.validation, rows: this.rowsCopied(), repairedRanges: this.repairedRanges });
    }
    if (this.batchedReports) {
      // IndexesBuilt and COMPLETED in one signal.
      const built = (await this.buildTargetIndexes()) ?? this.builtInCopy;
      await this.move('COMPLETED', undefined, { events: built ? [{ type: 'IndexesBuilt', detail: built }] : [] });
    } else {
      await this.buildIndexes();
      await this.move('COMPLETED');
    }
    return { rowsCopied: this.rowsCopied(), repairedRanges: this.repairedRanges };
  }

  /**
   * Validates every unit; narrowed mismatches are re-copied and re-checked up to
   * MAX_REPAIR_ROUNDS times, then the table fails with ConsistencyBreach.
   */
  private async validateFull(): Promise<number> {
    const { input } = this;
    const mode = input.validation === 'count' ? 'count' : 'checksum';
    if (isKeyless(this.table)) return this.validateKeyless(mode);
    let pending = validationRanges(input.table);
    // A key range of half a table can cost its side nearly a scan of the whole (docs/
    // benchmarks.md, batches sized by bytes): a table in several ranges is compared by its sides'
    // sums first, each side read once in shares of blocks, and range by range only when they differ.
    if (pending.length > 1) {
      if (flags.blockValidation) {
        if (await this.sidesMatchByBlocks(mode)) return 0;
      } else if (input.table.rowsEstimated <= WHOLE_TABLE_VALIDATION_ROWS && flags.wholeTableValidation) {
        // Executions begun before block validation: the whole table in one statement per side.
        const whole = await this.acts.check.validateChunk({ source: input.source, target: input.target, table: this.copyTable, range: { lower: null, upper: null }, mode, compareOnly: true });
        if (whole.match) return 0;
      }
    }
    let repaired = 0;
    for (let round = 0; ; round += 1) {
      const mismatched: { chunk: number; range: KeyRange }[] = [];
      await runBounded(pending, input.chunkParallelism, async ({ chunk, range }) => {
        const result = await this.acts.check.validateChunk({ source: input.source, target: input.target, table: this.copyTable, range, mode });
        for (const r of result.mismatches) mismatched.push({ chunk, range: r });
      });
      if (mismatched.length === 0) return repaired;
      if (round >= MAX_REPAIR_ROUNDS) {
        await this.event('ConsistencyBreach', { ranges: mismatched.length, rounds: round });
        throw ApplicationFailure.nonRetryable(
          `${this.label}: ${mismatched.length} key range(s) still differ between source and target after ${round} repair round(s); ` +
            'if the source is being written to, use mode: online',
          FAILURE.ConsistencyBreach,
        );
      }
      for (const { chunk, range } of mismatched) {
        await this.acts.check.repairRange({ ...this.ref(), table: this.copyTable, chunkIndex: chunk, range, fence: nextFence(this.chunks[chunk]) });
        repaired += 1;
      }
      pending = mismatched;
    }
  }

  /**
   * A table without a key: its sides compared whole, by count and an order-independent checksum
   * summed over shares of blocks. Nothing narrows a difference to rows that could be copied
   * again, so a difference fails the table.
   */
  private async validateKeyless(mode: 'count' | 'checksum'): Promise<number> {
    if (await this.sidesMatchByBlocks(mode)) return 0;
    await this.event('ConsistencyBreach', { ranges: 1, rounds: 0 });
    throw ApplicationFailure.nonRetryable(
      `${this.label}: source and target differ (rows counted and checksummed over each whole side); a table without a key cannot be repaired range by range — ` +
        'was the source written during the copy? Stop its writers and run the migration again, or give the table a key',
      FAILURE.ConsistencyBreach,
    );
  }

  /**
   * Whether source and target hold the same rows, by count and checksum summed over shares of
   * each side's blocks (above WHOLE_TABLE_VALIDATION_ROWS about VALIDATION_UNIT_ROWS rows a
   * share; all shares of both sides run as parallel units, bounded by the table's chunk parallelism).
   */
  private async sidesMatchByBlocks(mode: 'count' | 'checksum'): Promise<boolean> {
    const { input } = this;
    // A table of a few million rows is one share per side, read whole with PostgreSQL's parallel
    // workers, as before shares: at 2,000,000 rows no slower than two shares a side, and one
    // activity less per side (docs/benchmarks.md, validation by shares of blocks).
    const units = input.table.rowsEstimated <= WHOLE_TABLE_VALIDATION_ROWS ? 1 : Math.ceil(input.table.rowsEstimated / VALIDATION_UNIT_ROWS);
    const sides = { source: { rows: 0, sum: BigInt(0) }, target: { rows: 0, sum: BigInt(0) } };
    // Source and target shares alternate, so that both sides are read at the same time.
    const shares = Array.from({ length: units }, (_, unit) => (['source', 'target'] as const).map((side) => ({ side, unit }))).flat();
    await runBounded(shares, input.chunkParallelism, async ({ side, unit }) => {
      const relation = side === 'source' ? this.copyTable.source : this.copyTable.target;
      const share = await this.acts.check.checksumBlocks({ connection: input[side], relation, table: this.copyTable, mode, unit, units });
      sides[side].rows += share.rows;
      sides[side].sum += BigInt(share.sum);
    });
    return sides.source.rows === sides.target.rows && sides.source.sum === sides.target.sum;
  }

  // ── online mode ─────────────────────────────────────────────────────────────────────────

  /** Applies the change log until the parent asks to finish (cutover), then returns. */
  private async syncUntilCutover(): Promise<TableWorkflowResult> {
    if (this.machine.state === 'FULL_DONE') await this.move('INCR_SYNCING', 'copy done; applying the change log');
    while (!this.finishRequested) {
      await condition(() => !this.control.paused || this.finishRequested);
      if (this.finishRequested) break;
      if (this.historyFull()) return this.carryOn();
      let result;
      try {
        result = await this.slices.run('sync', () => this.syncChanges(this.steadySyncSlice(), this.onReadyQueue()));
      } catch (err) {
        if (!this.takenOver(err)) throw err;
        await condition(() => this.finishRequested);
        break;
      }
      if (!result) continue;
      const now = Date.now();
      const quiet = flags.quietIdleTables;
      if (quiet && result.applied > 0 && this.sync.validationBegun) this.sync.dirtySinceRecheck = true;
      await this.recordLag(result, now);
      if (!result.caughtUp) continue;
      if (await this.stepTowardsReady()) continue;
      const recheck = !quiet || this.sync.dirtySinceRecheck !== false;
      // (A table without a key keeps no dirty set: its changes apply exactly once, from a watermark.)
      if (this.input.validation !== 'none' && recheck && !isKeyless(this.table) && now - this.sync.lastRecheckAt >= this.timings.recheckMs) {
        this.sync.lastRecheckAt = now;
        await this.recheck();
        if (quiet) this.sync.dirtySinceRecheck = false;
        continue;
      }
      // An idle table waits longer and longer between looks at its log (up to MAX_IDLE_MS).
      const { sync } = this;
      const longest = quiet ? this.timings.maxIdleMs : LEGACY_MAX_IDLE_MS;
      const idle = sync.idleMs ?? IDLE_POLL_MS;
      sync.idleMs = !this.progressByQuery ? IDLE_POLL_MS : result.applied > 0 ? IDLE_POLL_MS : Math.min(longest, idle * 2);
      // Busy, but its slice found work queued for the slots (PATCHES.crowdedSync): off the slot for a while.
      if (result.crowded) sync.idleMs = Math.min(this.timings.maxIdleMs, Math.max(BUSY_DWELL_MS, idle * 2));
      // (Executions begun before the patch waited out the whole wait whatever control did.)
      if (flags.sequencedControl) {
        this.controlChanged = false;
        await condition(() => this.finishRequested || this.controlChanged, sync.idleMs);
      } else {
        await condition(() => this.finishRequested, sync.idleMs);
      }
    }
    if (this.machine.can('CUTTING_OVER')) await this.move('CUTTING_OVER', 'cutover: the parent drains the last changes');
    return { rowsCopied: this.rowsCopied(), repairedRanges: this.repairedRanges };
  }

  /**
   * The dirty keys re-checked while the table waits for the cutover. Under its sync fence
   * (fencedRecheck) the cutover's drain, once it has taken the fence, stops it as Superseded:
   * the drain has the table from there.
   */
  private async recheck(): Promise<void> {
    const fence = this.input.fencedRecheck ? { fence: nextFence(this.sync) } : {};
    try {
      await (this.onReadyQueue() ? this.acts.ready() : this.acts).check.checkDirtyKeys({ ...this.ref(), table: this.copyTable, ...fence });
    } catch (err) {
      if (!this.takenOver(err)) throw err;
      await condition(() => this.finishRequested);
    }
  }

  /**
   * The cutover's drain has taken the table's sync (its fence) over: only the drain takes a fence
   * ahead of the table's own. The parent asks the table to finish past the point of no return
   * (executions begun before PATCHES.tablesAskedAfterOutage: at the freeze), or cancels it if
   * the cutover rolls back: the table waits for either.
   */
  private takenOver(err: unknown): boolean {
    return this.input.fencedRecheck === true && innermostApplicationFailure(err)?.type === FAILURE.Superseded;
  }

  /**
   * The next slice of the sync loop: a table ready for the cutover (nothing left to validate or
   * build) dwells in its activity while it is busy (PATCHES.busySyncDwell).
   */
  private steadySyncSlice(): SyncInput {
    const slice = this.syncSlice();
    // (Recorded histories call patched() from the slice right after the indexes are built, before
    // the table declares itself ready: the check must stay nothingLeftToBuild, not declaredReady.)
    if (!slice.returnWhenCaughtUp || !this.nothingLeftToBuild() || !flags.busySyncDwell) return slice;
    return { ...slice, busyDwellMs: BUSY_DWELL_MS, ...(flags.crowdedSync ? { crowdedAfterMs: CROWDED_AFTER_MS } : {}) };
  }

  /** Validated and, where it has indexes to build, built: only the sync is left before the cutover. */
  private nothingLeftToBuild(): boolean {
    return this.sync.validated && (!this.input.indexes || this.sync.indexesBuilt === true);
  }

  /**
   * Whether the table has declared itself ready for the cutover: validated and, where it has
   * indexes to build, moved to AWAITING_APPROVAL (which stepTowardsReady does on the first
   * caught-up round after nothingLeftToBuild()).
   */
  private declaredReady(): boolean {
    return this.sync.validated && (!this.input.indexes || this.machine.state === 'AWAITING_APPROVAL');
  }

  /** The next sync slice's input. */
  private syncSlice(): SyncInput {
    return {
      ...this.ref(),
      table: this.copyTable,
      fence: nextFence(this.sync),
      sliceMs: SLICE_MS,
      batchKeys: SYNC_BATCH_KEYS,
      recordDirty: this.sync.validationBegun,
      ...(this.input.applyLanes ? { lanes: this.input.applyLanes } : {}),
      // Until declared ready, come back as soon as caught up; afterwards an
      // execution begun before progress was read by query polls for a whole slice. Otherwise
      // always: an idle table then holds no activity slot while it waits (its timer), so
      // hundreds of caught-up tables cannot starve the copies.
      returnWhenCaughtUp: this.progressByQuery || !this.declaredReady(),
    };
  }

  /** The lag for the tableState query; to the parent once caught up (and, before progress was read by query, every LAG_REPORT_MS). */
  private async recordLag(result: SyncResult, now: number): Promise<void> {
    const { sync } = this;
    sync.applied += result.applied;
    const lag: TableStatus['lag'] = { pendingChanges: result.pending, seconds: result.lagSeconds, changesApplied: sync.applied };
    sync.lag = lag;
    if (result.caughtUp && !sync.caughtUpReported) {
      sync.caughtUpReported = true;
      sync.lastLagReportAt = now;
      await this.report({ lag, event: { type: 'IncrementalCaughtUp', detail: { applied: result.applied, lagSeconds: result.lagSeconds } } });
    } else if (!this.progressByQuery && now - sync.lastLagReportAt >= LAG_REPORT_MS) {
      sync.lastLagReportAt = now;
      await this.report({ lag });
    }
  }

  /**
   * Caught up: validate (or repair), build the indexes, declare the table ready. True when it
   * did something that calls for another sync slice before anything else.
   */
  private async stepTowardsReady(): Promise<boolean> {
    const { sync, input } = this;
    if (!sync.validated && input.validation !== 'none') {
      await this.validateOrRepair();
      return true;
    }
    if (!sync.validated) {
      // validation: none — ready as soon as caught up.
      sync.validated = true;
      if (!input.indexes) await this.move('AWAITING_APPROVAL', 'caught up; syncing on until cutover');
    }
    if (input.indexes && !sync.indexesBuilt) {
      // The sync pauses while the indexes build; the next rounds catch up on what piled up.
      await this.buildIndexes();
      return true;
    }
    if (input.indexes && this.machine.state !== 'AWAITING_APPROVAL') {
      await this.move('AWAITING_APPROVAL', 'validated, indexes built, caught up; syncing on until cutover');
    }
    return false;
  }

  /** Live validation; differences go back into the change log, never re-copied under a running sync. */
  private async validateOrRepair(): Promise<void> {
    const { sync, input } = this;
    sync.validationBegun = true;
    await this.move('VALIDATING', 'caught up');
    const mismatches = await this.validateLive();
    if (mismatches.length === 0) {
      sync.validated = true;
      await this.event('ValidationPassed', { mode: input.validation, live: true, repairedRanges: this.repairedRanges });
      if (!input.indexes) await this.move('AWAITING_APPROVAL', 'validated; syncing on until cutover');
      return;
    }
    sync.validationRounds += 1;
    if (sync.validationRounds > MAX_REPAIR_ROUNDS) {
      await this.event('ConsistencyBreach', { ranges: mismatches.length, rounds: MAX_REPAIR_ROUNDS });
      throw ApplicationFailure.nonRetryable(
        `${this.label}: ${mismatches.length} key range(s) still differ between source and target after ${MAX_REPAIR_ROUNDS} repair round(s)`,
        FAILURE.ConsistencyBreach,
      );
    }
    await this.acts.check.enqueueKeys({ ...this.ref(), table: this.copyTable, ranges: mismatches });
    this.repairedRanges += mismatches.length;
    await this.move('INCR_SYNCING', `repairing ${mismatches.length} range(s) through the change log`);
  }

  /** Every unit compared in a short source snapshot, leaving out keys still in the log. */
  private async validateLive(): Promise<KeyRange[]> {
    const { input } = this;
    const mode = input.validation === 'count' ? 'count' : 'checksum';
    if (isKeyless(this.table)) return this.validateKeylessLive(mode);
    const mismatches: KeyRange[] = [];
    await runBounded(validationRanges(input.table), input.chunkParallelism, async ({ range }) => {
      const result = await this.acts.check.validateChunk({
        source: input.source,
        target: input.target,
        table: this.copyTable,
        range,
        mode,
        live: { migrationId: input.migrationId },
      });
      mismatches.push(...result.mismatches);
    });
    return mismatches;
  }

  /**
   * A table without a key, compared whole at one position of the source (validateAtPosition).
   * Nothing can narrow a difference to rows to apply again, so a difference fails the table.
   */
  private async validateKeylessLive(mode: 'count' | 'checksum'): Promise<KeyRange[]> {
    const result = await this.acts.check.validateAtPosition({ ...this.ref(), table: this.copyTable, fence: nextFence(this.sync), mode });
    if (result.match) return [];
    await this.event('ConsistencyBreach', { ranges: 1, rounds: 0, source: result.source, target: result.target });
    throw ApplicationFailure.nonRetryable(
      `${this.label}: source and target differ at position ${result.position} (source ${result.source.rows} rows, target ${result.target.rows}); ` +
        'a table without a key cannot be repaired row by row: cancel the migration and start it again',
      FAILURE.ConsistencyBreach,
    );
  }

  /**
   * A table declared ready for the cutover: its sync slices and re-checks run on the ready task
   * queue (PATCHES.readyQueue). The flag is read only then, so the marker sits where a table
   * first has such work.
   */
  private onReadyQueue(): boolean {
    return this.declaredReady() && flags.readyQueue;
  }


  /** Capture removed behind Ferry's back fails the sync for good; the parent hears why first. */
  private async syncChanges(args: SyncInput, onReadyQueue = false): Promise<SyncResult> {
    try {
      return await (onReadyQueue ? this.acts.ready() : this.acts).copy.syncChanges(args);
    } catch (err) {
      const failure = innermostApplicationFailure(err);
      if (failure?.type === FAILURE.CaptureLost && flags.captureLostEvent) await this.event('CaptureLost', { message: failure.message });
      throw err;
    }
  }

  // ── indexes ─────────────────────────────────────────────────────────────────────────────

  private async buildIndexes(): Promise<void> {
    const built = await this.buildTargetIndexes();
    if (built) await this.event('IndexesBuilt', built);
  }

  /** The table's target indexes (once; undefined when there is nothing to build or they are built). */
  private async buildTargetIndexes(): Promise<{ built: number; evicted: number } | undefined> {
    const { input, sync } = this;
    if (!input.indexes || sync.indexesBuilt) return undefined;
    // One round of the table's sync, while an exclusion constraint waits for it (online only).
    const syncRound = async () => {
      await this.syncChanges({ ...this.syncSlice(), returnWhenCaughtUp: true });
    };
    const listed = this.listedIndexes;
    this.listedIndexes = undefined;
    const built = await buildTableIndexes({ ...input, copyTable: this.copyTable, parallelism: input.indexes.parallelism }, syncRound, listed);
    sync.indexesBuilt = true;
    return built;
  }

  // ── shared ──────────────────────────────────────────────────────────────────────────────

  private ref() {
    return { migrationId: this.input.migrationId, source: this.input.source, target: this.input.target };
  }

  private async report(p: Omit<TableProgress, 'tableIndex'>): Promise<void> {
    if (!this.holdDecided) {
      this.holdDecided = true;
      if (this.finishesInCopy() && flags.smallTableReportsInResult) this.held = [];
    }
    if (this.held) {
      this.held.push(p);
      return;
    }
    await this.parent.signal(tableProgressSignal, { tableIndex: this.table.index, ...p });
  }

  /** Signals the milestones held back (the table fails, or continues as new), in order. */
  private async sendHeld(): Promise<void> {
    const held = this.held ?? [];
    this.held = undefined;
    await CancellationScope.nonCancellable(async () => {
      for (const p of held) await this.parent.signal(tableProgressSignal, { tableIndex: this.table.index, ...p }).catch(() => undefined);
    });
  }

  private event(type: EventType, detail?: Record<string, unknown>): Promise<void> {
    return this.report({ event: { type, detail } });
  }

  /** A phase change, reported with the milestones that go with it (in the same signal). */
  private async move(to: Phase, reason?: string, along: Omit<TableProgress, 'tableIndex' | 'phase'> = {}): Promise<void> {
    this.machine.to(to, new Date().toISOString(), reason);
    await this.report({ ...along, phase: to });
  }

  private rowsCopied(): number {
    return this.chunks.reduce((n, c) => n + c.status.rowsCopied, 0);
  }

  private historyFull(): boolean {
    return workflowInfo().continueAsNewSuggested || workflowInfo().historyLength >= (this.input.historyLimit ?? 10_000);
  }

  private async carryOn(): Promise<never> {
    await this.sendHeld();
    await condition(allHandlersFinished);
    const { machine, chunks, copyAllowed, sync, repairedRanges } = this;
    return continueAsNew<typeof tableMigrationWorkflow>({
      ...this.input,
      control: this.control,
      carried: { phase: machine.state, transitions: machine.transitions, chunks, copyAllowed, sync, repairedRanges },
    });
  }
}

/** A bigger fence for every dispatch: the chunk's (or the sync's) next token. */
function nextFence(holder: { fence: number }): number {
  holder.fence = Math.max(Date.now(), holder.fence + 1);
  return holder.fence;
}

function statusOf(checkpoint: ChunkCheckpoint): ChunkStatus {
  return { state: checkpoint.done ? 'DONE' : 'COPYING', rowsCopied: checkpoint.rowsCopied, checkpoint: checkpoint.lastKey };
}

/** What validation compares, one statement per side each: units sized by rows, else chunks. */
function validationRanges(table: TablePlan): { chunk: number; range: KeyRange }[] {
  if (table.validationUnits?.length) return table.validationUnits.map((u) => ({ chunk: u.chunk, range: { lower: u.lower, upper: u.upper } }));
  return table.chunks.map((c) => ({ chunk: c.index, range: { lower: c.lower, upper: c.upper } }));
}
