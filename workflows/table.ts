/**
 * tableMigrationWorkflow: one table, the per-table phase machine (docs/architecture.md §2).
 *   full:   PENDING → FULL_MIGRATING → FULL_DONE → VALIDATING → COMPLETED
 *   online: PENDING → FULL_MIGRATING → FULL_DONE → INCR_SYNCING ⇄ VALIDATING … until the parent
 *           asks it to finish at cutover (the parent then drains the last changes itself).
 * Chunks copy in parallel as short activity slices; milestones go to the parent, which owns
 * the event sequence. Long loops continue as new before the history grows large.
 */
import {
  ActivityCancellationType,
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  patched,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { SyncInput } from '../activities/sync-changes';
import { innermostApplicationFailure } from '../src/failures';
import { displayQualified } from '../src/identifiers';
import { ChunkCheckpoint, CopyTable, copyTableOf, KeyRange, TablePlan } from '../src/plan';
import { Phase, phaseMachine, Transition } from '../src/state-machine';
import { ChunkStatus, EventType, TableStatus } from '../src/status';
import { PATCHES } from '../src/names';
import { runBounded } from './bounded';
import { Control, controlSignal, finishSyncSignal, startCopySignal, TableProgress, tableProgressSignal, tableStateQuery } from './definitions';
import { buildTableIndexes } from './table-indexes';

export const SLICE_MS = 15_000;
export const MAX_REPAIR_ROUNDS = 3;
/** Online: how often caught-up tables re-check their dirty keys (keeps cutover's check small). */
export const RECHECK_MS = 15_000;
/** Online: pause between sync slices when the log was empty. */
export const IDLE_POLL_MS = 500;
/** Online, the longest wait of an idle table between looks at its change log. */
export const MAX_IDLE_MS = 8_000;
/** Online: report lag to the parent at least this often (each report is a history event there). */
export const LAG_REPORT_MS = 10_000;
export const SYNC_BATCH_KEYS = 5_000;

const copy = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 50 },
});

const check = proxyActivities<Activities>({
  startToCloseTimeout: '2 hours',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

export interface TableWorkflowInput {
  migrationId: string;
  parentWorkflowId: string;
  mode: 'full' | 'online';
  source: string;
  target: string;
  table: TablePlan;
  batchRows: number;
  validation: 'none' | 'count' | 'checksum';
  chunkParallelism: number;
  control: Control;
  /** Wait for the parent's startCopy signal (online mode bounds how many tables copy at once). */
  waitForCopySlot: boolean;
  /** Continue as new after this many history events (Temporal also suggests it). */
  historyLimit?: number;
  /**
   * Build the table's target indexes once it is loaded and validated (absent in executions
   * begun by an older Ferry, whose parent built every index at the end).
   */
  indexes?: { parallelism: number };
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
}

export interface TableWorkflowResult {
  rowsCopied: number;
  repairedRanges: number;
}

export async function tableMigrationWorkflow(input: TableWorkflowInput): Promise<TableWorkflowResult> {
  // Executions begun before it pushed every slice's progress and the lag to the parent.
  const progressByQuery = patched(PATCHES.progressByQuery);
  const { table } = input;
  const label = displayQualified(table.source);
  const carried = input.carried;
  const machine = phaseMachine(carried?.phase ?? 'PENDING', carried?.transitions);
  const chunks: ChunkState[] =
    carried?.chunks ?? table.chunks.map(() => ({ status: { state: 'PENDING', rowsCopied: 0, checkpoint: null }, fence: 0 }));
  const sync: SyncState = carried?.sync ?? {
    fence: 0,
    applied: 0,
    validationBegun: false,
    validated: false,
    validationRounds: 0,
    caughtUpReported: false,
    lastRecheckAt: 0,
    lastLagReportAt: 0,
  };
  let repairedRanges = carried?.repairedRanges ?? 0;
  let control: Control = input.control;
  let copyAllowed = carried?.copyAllowed ?? !input.waitForCopySlot;
  let finishRequested = false;
  // Activity slices in flight; a control change (pause, throttle, cutover) interrupts them. They
  // stop after their current batch, whose checkpoint is committed, and the next slice carries on.
  const slices = new Map<CancellationScope, 'copy' | 'sync'>();
  let controlVersion = 0;
  const interrupt = (kinds: ('copy' | 'sync')[]) => {
    controlVersion += 1;
    for (const [scope, kind] of slices) if (kinds.includes(kind)) scope.cancel();
  };
  const interruptible = async <T>(kind: 'copy' | 'sync', fn: () => Promise<T>): Promise<T | undefined> => {
    const scope = new CancellationScope();
    const version = controlVersion;
    slices.set(scope, kind);
    try {
      return await scope.run(fn);
    } catch (err) {
      // However an interrupted slice ended (cancelled, or timed out on a dead worker), its
      // committed work stands; anything else is a real failure.
      if (controlVersion !== version && !CancellationScope.current().consideredCancelled) return undefined;
      throw err;
    } finally {
      slices.delete(scope);
    }
  };
  setHandler(controlSignal, (c) => {
    control = c;
    // Executions begun before control changes interrupted copy slices too: there, only a pause
    // stopped a running sync slice (replaying their histories must issue the same commands).
    if (patched(PATCHES.interruptSlicesOnControl)) interrupt(['copy', 'sync']);
    else if (c.paused) interrupt(['sync']);
  });
  setHandler(startCopySignal, () => {
    copyAllowed = true;
  });
  setHandler(finishSyncSignal, () => {
    finishRequested = true;
    interrupt(['copy', 'sync']);
  });
  setHandler(tableStateQuery, () => ({ phase: machine.state, rowsCopied: rowsCopied(chunks), chunks: chunks.map((c) => c.status), lag: sync.lag }));

  const parent = getExternalWorkflowHandle(input.parentWorkflowId);
  const report = (p: Omit<TableProgress, 'tableIndex'>) => parent.signal(tableProgressSignal, { tableIndex: table.index, ...p });
  const event = (type: EventType, detail?: Record<string, unknown>) => report({ event: { type, detail } });
  // Capture removed behind Ferry's back fails the sync for good; the parent hears why first.
  const syncChanges = async (args: SyncInput) => {
    try {
      return await copy.syncChanges(args);
    } catch (err) {
      const failure = innermostApplicationFailure(err);
      if (failure?.type === 'CaptureLost' && patched(PATCHES.captureLostEvent)) await event('CaptureLost', { message: failure.message });
      throw err;
    }
  };
  const move = async (to: Phase, reason?: string) => {
    machine.to(to, new Date().toISOString(), reason);
    await report({ phase: to });
  };
  const copyTable = copyTableOf(table);
  const nextFence = (holder: { fence: number }) => {
    holder.fence = Math.max(Date.now(), holder.fence + 1);
    return holder.fence;
  };
  const historyFull = () => workflowInfo().continueAsNewSuggested || workflowInfo().historyLength >= (input.historyLimit ?? 10_000);
  const carryOn = async (): Promise<never> => {
    await condition(allHandlersFinished);
    return continueAsNew<typeof tableMigrationWorkflow>({
      ...input,
      control,
      carried: { phase: machine.state, transitions: machine.transitions, chunks, copyAllowed, sync, repairedRanges },
    });
  };

  if (machine.state === 'PENDING') {
    await condition(() => copyAllowed);
    await move('FULL_MIGRATING');
  }

  if (machine.state === 'FULL_MIGRATING') {
    await runBounded(
      chunks.map((_, i) => i),
      input.chunkParallelism,
      async (i) => {
        const chunk = chunks[i];
        while (chunk.status.state !== 'DONE') {
          await condition(() => !control.paused);
          if (historyFull()) return;
          chunk.status.state = 'COPYING';
          // The table's share of the cap, split among the chunks that copy at once.
          const copyingChunks = Math.max(1, Math.min(input.chunkParallelism, chunks.filter((c) => c.status.state !== 'DONE').length));
          const perChunk = control.rowsPerSecond && control.rowsPerSecond / (control.tablesSharing ?? 1) / copyingChunks;
          const result = await interruptible('copy', () =>
            copy.copyChunk({
              migrationId: input.migrationId,
              source: input.source,
              target: input.target,
              table: copyTable,
              chunk: table.chunks[i],
              batchRows: control.batchRows ?? input.batchRows,
              fence: nextFence(chunk),
              sliceMs: SLICE_MS,
              rowsPerSecond: perChunk ? Math.max(1, Math.floor(perChunk)) : undefined,
            }),
          );
          if (!result) continue; // interrupted: the next slice runs under the new control
          chunk.status = statusOf(result.checkpoint);
          if (progressByQuery && !result.checkpoint.done) continue; // the tableState query shows it
          await report({
            chunk: { index: i, ...chunk.status },
            event: { type: 'SliceMigrated', detail: { chunk: i, rows: result.rows, bytes: result.bytes, done: result.checkpoint.done } },
          });
        }
      },
    );
    if (chunks.some((c) => c.status.state !== 'DONE')) return carryOn();
    await move('FULL_DONE');
    await event('TableCopied', { rows: rowsCopied(chunks) });
  }

  // One round of the table's sync, while its indexes are built (online only).
  const syncRound = async () => {
    await syncChanges({
      migrationId: input.migrationId,
      source: input.source,
      target: input.target,
      table: copyTable,
      fence: nextFence(sync),
      sliceMs: SLICE_MS,
      batchKeys: SYNC_BATCH_KEYS,
      recordDirty: sync.validationBegun,
      returnWhenCaughtUp: true,
    });
  };
  const buildIndexes = async () => {
    if (!input.indexes || sync.indexesBuilt) return;
    const { parallelism } = input.indexes;
    const built = await buildTableIndexes({ ...input, copyTable, parallelism }, syncRound);
    sync.indexesBuilt = true;
    await event('IndexesBuilt', built);
  };

  if (input.mode === 'full') {
    if (machine.state === 'FULL_DONE' && input.validation !== 'none') {
      await move('VALIDATING');
      repairedRanges = await validateFull(input, copyTable, chunks, nextFence, label);
      await event('ValidationPassed', { mode: input.validation, rows: rowsCopied(chunks), repairedRanges });
    }
    await buildIndexes();
    await move('COMPLETED');
    return { rowsCopied: rowsCopied(chunks), repairedRanges };
  }

  // Online: apply the change log until the parent asks to finish (cutover).
  if (machine.state === 'FULL_DONE') await move('INCR_SYNCING', 'copy done; applying the change log');
  while (!finishRequested) {
    await condition(() => !control.paused || finishRequested);
    if (finishRequested) break;
    if (historyFull()) return carryOn();
    const result = await interruptible('sync', () =>
      syncChanges({
        migrationId: input.migrationId,
        source: input.source,
        target: input.target,
        table: copyTable,
        fence: nextFence(sync),
        sliceMs: SLICE_MS,
        batchKeys: SYNC_BATCH_KEYS,
        recordDirty: sync.validationBegun,
        // Until ready (validated, indexes built), come back as soon as caught up; afterwards
        // poll for a whole slice.
        // With progress read by query, always: an idle table then holds no activity slot while
        // it waits (the timer below), so hundreds of caught-up tables cannot starve the copies.
        returnWhenCaughtUp: progressByQuery || !sync.validated || (input.indexes !== undefined && machine.state !== 'AWAITING_APPROVAL'),
      }),
    );
    if (!result) continue;
    const now = Date.now();
    sync.applied += result.applied;
    const lag: TableStatus['lag'] = { pendingChanges: result.pending, seconds: result.lagSeconds, changesApplied: sync.applied };
    sync.lag = lag;
    if (result.caughtUp && !sync.caughtUpReported) {
      sync.caughtUpReported = true;
      sync.lastLagReportAt = now;
      await report({ lag, event: { type: 'IncrementalCaughtUp', detail: { applied: result.applied, lagSeconds: result.lagSeconds } } });
    } else if (!progressByQuery && now - sync.lastLagReportAt >= LAG_REPORT_MS) {
      sync.lastLagReportAt = now;
      await report({ lag });
    }
    if (!result.caughtUp) continue;

    if (!sync.validated && input.validation !== 'none') {
      sync.validationBegun = true;
      await move('VALIDATING', 'caught up');
      const mismatches = await validateLive(input, copyTable);
      if (mismatches.length === 0) {
        sync.validated = true;
        await event('ValidationPassed', { mode: input.validation, live: true, repairedRanges });
        if (!input.indexes) await move('AWAITING_APPROVAL', 'validated; syncing on until cutover');
      } else {
        sync.validationRounds += 1;
        if (sync.validationRounds > MAX_REPAIR_ROUNDS) {
          await event('ConsistencyBreach', { ranges: mismatches.length, rounds: MAX_REPAIR_ROUNDS });
          throw ApplicationFailure.nonRetryable(
            `${label}: ${mismatches.length} key range(s) still differ between source and target after ${MAX_REPAIR_ROUNDS} repair round(s)`,
            'ConsistencyBreach',
          );
        }
        // Never re-copy under a running sync: put the keys back into the log instead.
        await check.enqueueKeys({ migrationId: input.migrationId, source: input.source, target: input.target, table: copyTable, ranges: mismatches });
        repairedRanges += mismatches.length;
        await move('INCR_SYNCING', `repairing ${mismatches.length} range(s) through the change log`);
      }
      continue;
    }
    if (!sync.validated) {
      // validation: none — ready as soon as caught up.
      sync.validated = true;
      if (!input.indexes) await move('AWAITING_APPROVAL', 'caught up; syncing on until cutover');
    }
    if (input.indexes && !sync.indexesBuilt) {
      // The sync pauses while the indexes build; the next rounds catch up on what piled up.
      await buildIndexes();
      continue;
    }
    if (input.indexes && machine.state !== 'AWAITING_APPROVAL') {
      await move('AWAITING_APPROVAL', 'validated, indexes built, caught up; syncing on until cutover');
    }
    if (input.validation !== 'none' && now - sync.lastRecheckAt >= RECHECK_MS) {
      sync.lastRecheckAt = now;
      await check.checkDirtyKeys({ migrationId: input.migrationId, source: input.source, target: input.target, table: copyTable });
      continue;
    }
    // An idle table waits longer and longer between looks at its log (up to MAX_IDLE_MS).
    sync.idleMs = !progressByQuery ? IDLE_POLL_MS : result.applied > 0 ? IDLE_POLL_MS : Math.min(MAX_IDLE_MS, (sync.idleMs ?? IDLE_POLL_MS) * 2);
    await condition(() => finishRequested, sync.idleMs);
  }
  if (machine.can('CUTTING_OVER')) await move('CUTTING_OVER', 'cutover: the parent drains the last changes');
  return { rowsCopied: rowsCopied(chunks), repairedRanges };
}

function statusOf(checkpoint: ChunkCheckpoint): ChunkStatus {
  return { state: checkpoint.done ? 'DONE' : 'COPYING', rowsCopied: checkpoint.rowsCopied, checkpoint: checkpoint.lastKey };
}

/** What validation compares, one statement per side each: units sized by rows, else chunks. */
function validationRanges(table: TablePlan): { chunk: number; range: KeyRange }[] {
  if (table.validationUnits?.length) return table.validationUnits.map((u) => ({ chunk: u.chunk, range: { lower: u.lower, upper: u.upper } }));
  return table.chunks.map((c) => ({ chunk: c.index, range: { lower: c.lower, upper: c.upper } }));
}

function rowsCopied(chunks: ChunkState[]): number {
  return chunks.reduce((n, c) => n + c.status.rowsCopied, 0);
}

/** Online: compares every chunk against one source snapshot, leaving out keys still in the log. */
async function validateLive(input: TableWorkflowInput, table: CopyTable): Promise<KeyRange[]> {
  const mode = input.validation === 'count' ? 'count' : 'checksum';
  const mismatches: KeyRange[] = [];
  await runBounded(validationRanges(input.table), input.chunkParallelism, async ({ range }) => {
    const result = await check.validateChunk({
      source: input.source,
      target: input.target,
      table,
      range,
      mode,
      live: { migrationId: input.migrationId },
    });
    mismatches.push(...result.mismatches);
  });
  return mismatches;
}

/**
 * Full mode: validates every chunk; narrowed mismatches are re-copied and re-checked up to
 * MAX_REPAIR_ROUNDS times, then the table fails with ConsistencyBreach.
 */
async function validateFull(
  input: TableWorkflowInput,
  table: CopyTable,
  chunks: ChunkState[],
  nextFence: (c: ChunkState) => number,
  label: string,
): Promise<number> {
  const mode = input.validation === 'count' ? 'count' : 'checksum';
  let pending = validationRanges(input.table);
  let repaired = 0;
  for (let round = 0; ; round += 1) {
    const mismatched: { chunk: number; range: KeyRange }[] = [];
    await runBounded(pending, input.chunkParallelism, async ({ chunk, range }) => {
      const result = await check.validateChunk({ source: input.source, target: input.target, table, range, mode });
      for (const r of result.mismatches) mismatched.push({ chunk, range: r });
    });
    if (mismatched.length === 0) return repaired;
    if (round >= MAX_REPAIR_ROUNDS) {
      await getExternalWorkflowHandle(input.parentWorkflowId).signal(tableProgressSignal, {
        tableIndex: table.index,
        event: { type: 'ConsistencyBreach', detail: { ranges: mismatched.length, rounds: round } },
      });
      throw ApplicationFailure.nonRetryable(
        `${label}: ${mismatched.length} key range(s) still differ between source and target after ${round} repair round(s); ` +
          'if the source is being written to, use mode: online',
        'ConsistencyBreach',
      );
    }
    for (const { chunk, range } of mismatched) {
      await check.repairRange({
        migrationId: input.migrationId,
        source: input.source,
        target: input.target,
        table,
        chunkIndex: chunk,
        range,
        fence: nextFence(chunks[chunk]),
      });
      repaired += 1;
    }
    pending = mismatched;
  }
}
