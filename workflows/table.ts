/**
 * tableMigrationWorkflow: one table, the per-table state machine of seed 001.
 * PENDING → FULL_MIGRATING (chunks in parallel, one short activity per slice) → FULL_DONE →
 * VALIDATING (count/checksum per chunk, bisect, re-copy, re-check) → COMPLETED.
 * It reports milestones to the parent and continues as new before its history grows large.
 */
import {
  ActivityCancellationType,
  allHandlersFinished,
  ApplicationFailure,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { CopyTable } from '../src/db/copy-stream';
import { displayQualified } from '../src/identifiers';
import { ChunkCheckpoint, KeyRange, TablePlan } from '../src/plan';
import { Phase, phaseMachine, Transition } from '../src/state-machine';
import { ChunkStatus, EventType } from '../src/status';
import { runBounded } from './bounded';
import { Control, controlSignal, TableProgress, tableProgressSignal } from './definitions';

export const SLICE_MS = 15_000;
export const MAX_REPAIR_ROUNDS = 3;

const copy = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '20 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 50 },
});

const check = proxyActivities<Activities>({
  startToCloseTimeout: '2 hours',
  heartbeatTimeout: '1 minute',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

export interface TableWorkflowInput {
  migrationId: string;
  parentWorkflowId: string;
  source: string;
  target: string;
  table: TablePlan;
  batchRows: number;
  validation: 'none' | 'count' | 'checksum';
  chunkParallelism: number;
  control: Control;
  /** Continue as new after this many history events (Temporal also suggests it). */
  historyLimit?: number;
  /** Carried across continue-as-new. */
  carried?: {
    phase: Phase;
    transitions: Transition<Phase>[];
    chunks: ChunkState[];
  };
}

export interface ChunkState {
  status: ChunkStatus;
  /** The last fence handed out for this chunk; every dispatch takes a bigger one. */
  fence: number;
}

export interface TableWorkflowResult {
  rowsCopied: number;
  repairedRanges: number;
}

export async function tableMigrationWorkflow(input: TableWorkflowInput): Promise<TableWorkflowResult> {
  const { table } = input;
  const label = displayQualified(table.source);
  const machine = phaseMachine(input.carried?.phase ?? 'PENDING', input.carried?.transitions);
  const chunks: ChunkState[] =
    input.carried?.chunks ?? table.chunks.map(() => ({ status: { state: 'PENDING', rowsCopied: 0, checkpoint: null }, fence: 0 }));
  let control: Control = input.control;
  setHandler(controlSignal, (c) => {
    control = c;
  });

  const parent = getExternalWorkflowHandle(input.parentWorkflowId);
  const report = (p: Omit<TableProgress, 'tableIndex'>) => parent.signal(tableProgressSignal, { tableIndex: table.index, ...p });
  const event = (type: EventType, detail?: Record<string, unknown>) => report({ event: { type, detail } });
  const move = async (to: Phase, reason?: string) => {
    machine.to(to, new Date().toISOString(), reason);
    await report({ phase: to });
  };
  const copyTable: CopyTable = {
    index: table.index,
    source: table.source,
    target: table.target,
    columns: table.columns,
    keyColumns: table.keyColumns,
    copyFormat: table.copyFormat,
    keyCollateC: table.keyCollateC,
  };
  const nextFence = (chunk: ChunkState) => {
    chunk.fence = Math.max(Date.now(), chunk.fence + 1);
    return chunk.fence;
  };
  const historyFull = () =>
    workflowInfo().continueAsNewSuggested || workflowInfo().historyLength >= (input.historyLimit ?? 10_000);

  if (machine.state === 'PENDING') await move('FULL_MIGRATING');

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
          const active = chunks.filter((c) => c.status.state === 'COPYING').length;
          const result = await copy.copyChunk({
            migrationId: input.migrationId,
            source: input.source,
            target: input.target,
            table: copyTable,
            chunk: table.chunks[i],
            batchRows: control.batchRows ?? input.batchRows,
            fence: nextFence(chunk),
            sliceMs: SLICE_MS,
            rowsPerSecond: control.rowsPerSecond ? Math.max(1, Math.floor(control.rowsPerSecond / active)) : undefined,
          });
          chunk.status = statusOf(result.checkpoint);
          await report({
            chunk: { index: i, ...chunk.status },
            event: {
              type: 'SliceMigrated',
              detail: { chunk: i, rows: result.rows, bytes: result.bytes, done: result.checkpoint.done },
            },
          });
        }
      },
    );
    if (chunks.some((c) => c.status.state !== 'DONE')) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof tableMigrationWorkflow>({
        ...input,
        control,
        carried: { phase: machine.state, transitions: machine.transitions, chunks },
      });
    }
    await move('FULL_DONE');
    await event('TableCopied', { rows: rowsCopied(chunks) });
  }

  let repairedRanges = 0;
  if (machine.state === 'FULL_DONE' && input.validation !== 'none') {
    await move('VALIDATING');
    repairedRanges = await validateTable(input, copyTable, chunks, nextFence, label);
    await event('ValidationPassed', { mode: input.validation, rows: rowsCopied(chunks), repairedRanges });
  }
  await move('COMPLETED');
  return { rowsCopied: rowsCopied(chunks), repairedRanges };
}

function statusOf(checkpoint: ChunkCheckpoint): ChunkStatus {
  return { state: checkpoint.done ? 'DONE' : 'COPYING', rowsCopied: checkpoint.rowsCopied, checkpoint: checkpoint.lastKey };
}

function rowsCopied(chunks: ChunkState[]): number {
  return chunks.reduce((n, c) => n + c.status.rowsCopied, 0);
}

/**
 * Validates every chunk; narrowed mismatches are re-copied and re-checked up to
 * MAX_REPAIR_ROUNDS times, then the table fails with ConsistencyBreach.
 */
async function validateTable(
  input: TableWorkflowInput,
  table: CopyTable,
  chunks: ChunkState[],
  nextFence: (c: ChunkState) => number,
  label: string,
): Promise<number> {
  const mode = input.validation === 'count' ? 'count' : 'checksum';
  let pending: { chunk: number; range: KeyRange }[] = input.table.chunks.map((c) => ({ chunk: c.index, range: { lower: c.lower, upper: c.upper } }));
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
