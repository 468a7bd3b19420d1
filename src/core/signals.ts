/**
 * Signals and queries (wire names of docs/architecture.md §9). Imported by workflows and by the client, so
 * `temporal workflow signal --name approveCutover` and FerryClient speak the same language.
 */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import { Phase } from './state-machine';
import { ChangeStatusDocument } from './change-status';
import { Audit, ChunkStatus, EventType, StatusDocument, TableStatus } from './status';

export type { Audit };

export interface CancelRequest {
  reason?: string;
  /** Who asked (the CLI sends the OS user). */
  actor?: string;
}

export interface ThrottleRequest {
  /** Copy rate cap for the whole migration; 0 or absent removes the cap. */
  rowsPerSecond?: number;
  batchRows?: number;
}

export const cancelSignal = defineSignal<[CancelRequest?]>('cancel');
// The optional Audit argument says who sent the signal and why; workers that predate it ignore it.
export const approveCutoverSignal = defineSignal<[Audit?]>('approveCutover');
export const pauseSignal = defineSignal<[Audit?]>('pause');
export const resumeSignal = defineSignal<[Audit?]>('resume');
export const throttleSignal = defineSignal<[ThrottleRequest, Audit?]>('throttle');
export const stateQuery = defineQuery<StatusDocument>('state');
/** The same wire name on a changeWorkflow: its status document. */
export const changeStateQuery = defineQuery<ChangeStatusDocument>('state');
/** To a rewrite's retirement workflow (`<change id>/retire-<step index>`): swap back within keepOld. */
export const revertSignal = defineSignal<[Audit?]>('revert');

/** A rewrite's old table during keepOld, and a revert's course (the `state` query of rewriteRetireWorkflow). */
/** One `ferry revert` of a rewrite step: who asked and why, and how it went. */
export type RevertAttempt = Audit & { requestedAt: string; lockedMs?: number; carried?: number; rows?: number; error?: string };

export interface RetireState {
  phase: 'KEEPING' | 'REVERTING' | 'REVERTED' | 'DROPPED';
  /** When the old table goes (KEEPING), or the new one a revert put aside (REVERTED). */
  until: string;
  /** The latest revert. */
  revert?: RevertAttempt;
  /** Every revert asked for, in order (the change's status and result show them as controls). */
  reverts?: RevertAttempt[];
  /** Revert attempts that failed (the new table stayed in place): their errors. */
  failures?: string[];
}

/** What rewriteRetireWorkflow returns: whether it dropped the old table, and the reverts asked for. */
export interface RetireResult {
  dropped: boolean;
  reverted?: boolean;
  reverts?: RevertAttempt[];
}
export const retireStateQuery = defineQuery<RetireState>('state');

/** What the parent forwards to its table workflows. */
export interface Control {
  paused: boolean;
  /** The migration's copy rate cap, shared by every table copying at once. */
  rowsPerSecond?: number;
  batchRows?: number;
  /** How many tables copy at once and so share rowsPerSecond (absent: 1). */
  tablesSharing?: number;
  /**
   * The order the parent sent it in. Signals to a table can arrive out of order (a pause and a
   * resume sent back to back were seen delivered resume first): a table applies no control
   * older than the one it holds. Absent in executions begun before patch `sequenced-control`.
   */
  seq?: number;
}

/** A table workflow's live progress, read by `ferry status` rather than pushed to the parent. */
export interface TableLiveState {
  phase: Phase;
  rowsCopied: number;
  chunks: ChunkStatus[];
  lag?: TableStatus['lag'];
  /** Whether the table holds a pause (the parent forwards control to its tables). */
  paused?: boolean;
}

/** A child's milestone, reported to the parent, which owns the event sequence. */
export interface TableProgress {
  tableIndex: number;
  phase?: Phase;
  chunk?: { index: number } & ChunkStatus;
  lag?: TableStatus['lag'];
  event?: { type: EventType; detail?: Record<string, unknown> };
  /** Several events in order, after the phase (PATCHES.batchedReports). */
  events?: { type: EventType; detail?: Record<string, unknown> }[];
}

// Internal: parent ↔ table workflows.
export const controlSignal = defineSignal<[Control]>('control');
export const tableProgressSignal = defineSignal<[TableProgress]>('tableProgress');
/** Online mode: the parent lets a table start copying (bounded tables copying at once). */
export const startCopySignal = defineSignal('startCopy');
/** Online mode, cutover: stop syncing and return; the parent drains the rest. */
export const finishSyncSignal = defineSignal('finishSync');
/** A table workflow's progress (query on `<id>/table-<n>`). */
export const tableStateQuery = defineQuery<TableLiveState>('tableState');
