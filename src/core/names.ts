/**
 * Names other programs rely on (docs/architecture.md §9). Keep them stable: the `temporal` CLI, Go and
 * Python services and the Web UI address Ferry through these strings.
 * Pure module: imported by workflows, so no Node APIs here.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const DEFAULT_TASK_QUEUE = 'ferry';

/**
 * The task queue beside a worker's own that carries only an online cutover's steps inside the
 * write outage (`ferry-cutover` beside `ferry`): every worker polls it with activity slots of its
 * own (CUTOVER_ACTIVITY_SLOTS in src/worker.ts), so those steps never wait behind the tables' syncs.
 */
export const cutoverTaskQueue = (taskQueue: string) => `${taskQueue}-cutover`;
/** Where the online tables ready for the cutover sync while they wait for it (PATCHES.readyQueue). */
export const readyTaskQueue = (taskQueue: string) => `${taskQueue}-ready`;

export const MIGRATION_WORKFLOW = 'migrationWorkflow';
export const TABLE_WORKFLOW = 'tableMigrationWorkflow';
/** A change plan: in-place schema changes on one database (docs/architecture.md §10). */
export const CHANGE_WORKFLOW = 'changeWorkflow';
/** Internal helper workflows (not migrations; `ferry list` hides them). */
export const PREFLIGHT_WORKFLOW = 'preflightWorkflow';
export const UNFREEZE_WORKFLOW = 'unfreezeWorkflow';
/** Removes what a migration left on the source (and, for `ferry cleanup`, on the target). */
export const CLEANUP_WORKFLOW = 'cleanupWorkflow';
/** `ferry cleanup` of a change plan: capture and shadows its rewrite steps left. */
export const CHANGE_CLEANUP_WORKFLOW = 'changeCleanupWorkflow';
/** Runs a change plan's preflight for `ferry start`. */
export const CHANGE_PREFLIGHT_WORKFLOW = 'changePreflightWorkflow';
/** Keeps a rewrite step's old table for keepOld, then drops it. */
export const REWRITE_RETIRE_WORKFLOW = 'rewriteRetireWorkflow';
/** Publishes the events a run left unpublished when it ended (NATS was down), then ends. */
export const EVENT_PUBLISHER_WORKFLOW = 'eventPublisherWorkflow';
export const HELPER_WORKFLOW_TYPES = [PREFLIGHT_WORKFLOW, UNFREEZE_WORKFLOW, CLEANUP_WORKFLOW, CHANGE_PREFLIGHT_WORKFLOW, REWRITE_RETIRE_WORKFLOW, CHANGE_CLEANUP_WORKFLOW, EVENT_PUBLISHER_WORKFLOW];

/** Workflow ids derived from a migration's id. */
export const workflowIds = {
  table: (migrationId: string, tableIndex: number) => `${migrationId}/table-${tableIndex}`,
  cleanup: (migrationId: string) => `${migrationId}/cleanup`,
  /** A rewrite step's old table during keepOld (step index from 0). */
  retire: (changeId: string, step: number) => `${changeId}/retire-${step}`,
  /** The publisher of a run's events still to go on the stream when the run ended (workflows/event-publisher.ts). */
  events: (runId: string) => `${runId}/events`,
};

/**
 * patched() ids: each guards a change of workflow behaviour, so that executions begun before
 * it replay the commands they recorded. Remove one only after no execution that predates it can
 * still be running (deprecatePatch first).
 */
export const PATCHES = {
  refuseInvalidThrottle: 'refuse-invalid-throttle',
  interruptSlicesOnControl: 'interrupt-slices-on-control',
  shareRateCapAcrossTables: 'share-rate-cap-across-tables',
  /**
   * Target indexes built per table as soon as it is ready, foreign keys before the approval;
   * online, the freeze installed with capture and flipped at cutover while the sync runs.
   */
  targetReadyBeforeCutover: 'target-ready-before-cutover',
  /**
   * Progress is read, not pushed: table workflows signal their parent at milestones only (a
   * phase, an event, a chunk done) and answer the tableState query for the rest; the parent
   * upserts its search attributes only when they change. Keeps histories from growing with time.
   */
  progressByQuery: 'progress-by-query',
  /** Tables created without their primary key, built after the load (index-free load). */
  primaryKeyAfterLoad: 'primary-key-after-load',
  /** callback.secret must name a FERRY_SECRET_* variable (workflows/migration/spec-input.ts). */
  ferrySecretNames: 'ferry-secret-names',
  /** A sync that finds capture removed or disabled reports a CaptureLost event before failing. */
  captureLostEvent: 'capture-lost-event',
  /** Online, onFailure: keep: a FAILED migration keeps its change capture for `ferry retry`. */
  keepCaptureForRetry: 'keep-capture-for-retry',
  /** Control signals are recorded with their actor and reason, and reported as ControlReceived events. */
  auditedControls: 'audited-controls',
  /** A change plan records its control signals with who sent them and why (ControlReceived). */
  auditedChangeControls: 'audited-change-controls',
  /** A rewrite's retirement keeps capture on the new table and takes the `revert` signal within keepOld. */
  revertibleRewrite: 'revertible-rewrite',
  /** A change plan continues as new between backfill slices once its history is long (ChangeOptions.historyLimit). */
  changeContinueAsNew: 'change-continue-as-new',
  /**
   * Idle tables stay quiet: a caught-up table looks at its change log at most every 30 s (it was
   * 8 s) and re-checks its dirty keys only when the sync recorded some since the last check, so
   * hundreds of tables waiting for the cutover no longer crowd the workers the copying tables need.
   */
  quietIdleTables: 'quiet-idle-tables',
  /**
   * capture: logical (plan.capture): a publication and a slot instead of row triggers, a
   * consumer activity beside the tables, and a cutover that waits for it before the drain.
   */
  logicalCapture: 'logical-capture',
  /**
   * A preflight helper workflow that preflight refuses completes with the refusal as its result
   * (src/core/failures.ts PreflightRefusal) instead of failing: a refusal is an answer, not a
   * failed workflow in the Web UI's list.
   */
  preflightRefusalAsResult: 'preflight-refusal-as-result',
  /**
   * Control forwarded to the tables carries a sequence number (Control.seq), and a table waiting
   * between looks at its log wakes when control changes: a resume acts at once.
   */
  sequencedControl: 'sequenced-control',
  /**
   * Logical capture: the cutover stops the consumer after the drain without waiting, inside the
   * write outage, for its activity to acknowledge (up to the heartbeat throttle); the stop is
   * awaited past the point of no return, before capture is released.
   */
  consumerStopOutsideOutage: 'consumer-stop-outside-outage',
  /**
   * A table reports its milestones in fewer signals: the last chunk done, FULL_DONE and
   * TableCopied in one; IndexesBuilt and COMPLETED in one (TableProgress.events); and it lists
   * its source indexes while its primary key is built. Each signal is a round trip for the table
   * and a workflow task for the parent: on hundreds of small tables they were most of the time.
   */
  batchedReports: 'batched-reports',
  /**
   * Full mode: the parent marks a table FULL_MIGRATING once its workflow has started, and the
   * table sends no signal for it (TableWorkflowInput.copyingMarkedByParent): one round trip and
   * one parent workflow task fewer per table.
   */
  parentMarksCopying: 'parent-marks-copying',
  /**
   * Full mode: a small table (src/core/plan.ts isSmallTable) gets its primary key, indexes and
   * ANALYZE from its copy activity once the chunk is done, instead of from activities of their
   * own (workflows/migration/table.ts finishesInCopy).
   */
  smallTableInOneStep: 'small-table-in-one-step',
  /**
   * Full mode: a small table takes a quarter of a parallelism.tables slot, so that four of them
   * copy where one large table would (workflows/migration/full-load.ts, runWeighted).
   */
  smallTablesShareSlots: 'small-tables-share-slots',
  /**
   * Full mode: a small table that finishes in its copy (smallTableInOneStep) sends its parent no
   * signal: its milestones come back in its result (TableWorkflowResult.reports), which the
   * parent applies in order as the table ends — or, when it fails, in signals just before. The
   * two signals it sent were two round trips for the table and two workflow tasks for the parent.
   */
  smallTableReportsInResult: 'small-table-reports-in-result',
  /**
   * Full mode, a migration of many small tables (at least SMALL_GROUP_FROM): they are copied in
   * groups, each group by one activity of the parent's (copySmallTables: copy, key, indexes,
   * ANALYZE and validation of each of its tables) instead of a table workflow per table — whose
   * start, activities and end cost Temporal more than 50 small tables' copies cost the databases.
   */
  smallTableGroups: 'small-table-groups',
  /**
   * Online, a table ready for the cutover: its sync activity keeps polling while its rounds find
   * changes, for up to BUSY_DWELL_MS (SyncInput.busyDwellMs), instead of returning after each
   * round that caught up — a busy table took an activity, two new sessions and a fence every
   * half second, which cost its source more than the rounds' own work.
   */
  busySyncDwell: 'busy-sync-dwell',
  /**
   * A spec without batchRows copies in batches sized by bytes (src/core/batch-size.ts); a
   * migration started before keeps the 50,000 rows its spec's default then was.
   */
  batchesByBytes: 'batches-by-bytes',
  /**
   * Full mode: a table of up to WHOLE_TABLE_VALIDATION_ROWS rows in several chunks is first
   * compared whole, one statement per side (workflows/migration/table.ts validateFull); its chunks are
   * compared one by one, and repaired, only when that differs.
   */
  wholeTableValidation: 'whole-table-validation',
  /**
   * Full mode: a table in several chunks, of any size, is first compared by summing each side's
   * shares of physical blocks (checksumBlocks, parallel units, each side read once; one share,
   * the whole relation, up to WHOLE_TABLE_VALIDATION_ROWS); its chunks
   * are compared one by one, and repaired, only when the sums differ. Supersedes
   * wholeTableValidation for executions that take it.
   */
  blockValidation: 'block-validation',
  /**
   * Logical capture: a consumer that fails during the cutover (its slot lost) ends the waits for
   * writers and for the consumer at once, and the migration rolls back; before, the cutover
   * went on waiting for a consumer that would never confirm (awaitCaptured's retries, about half
   * an hour) with the source frozen.
   */
  deadConsumerEndsCutover: 'dead-consumer-ends-cutover',
  /**
   * cutover.onBlocked: terminate rolls back when a blocker has no session to end (a prepared
   * transaction); before, the cutover kept the source frozen until someone ended it by hand.
   */
  unterminableBlockersRollBack: 'unterminable-blockers-roll-back',
  /** A sql step's `down:` that sets NOT NULL runs in the safe form (CHECK NOT VALID, VALIDATE, SET NOT NULL), as a step does. */
  safeDownSetNotNull: 'safe-down-set-not-null',
  /** A change plan's workflow runs its own preflight; before, it took a result its starter passed (which any Temporal client could make up). */
  changeOwnPreflight: 'change-own-preflight',
  /** A sql step's statement runs under its statementTimeout (default 1 min), not the step's whole timeout (24 h by default). */
  sqlStatementTimeout: 'sql-statement-timeout',
  /** Who started a migration or change plan and why (`ferry start --actor --reason`), a `start` control in its status and result. */
  auditedStart: 'audited-start',
  /** A `down:` SET NOT NULL in the safe form that fails drops its helper CHECK, as a failed step's clean-up does. */
  cleanFailedSafeDown: 'clean-failed-safe-down',
  /**
   * Migrations and change plans take controls alike: a throttle changes only what it names (a
   * migration's dropped its cap when a throttle named batchRows alone), a change plan refuses a
   * batchRows out of its range (it clamped it to 100,000 in silence) and names who cancelled in
   * the cancel's reason (only a migration's did).
   */
  sameControls: 'same-controls',
  /**
   * Every event also published to the NATS JetStream stream FERRY_EVENTS by the workers that have
   * FERRY_NATS_URL (workflows/callbacks.ts): an activity per burst of events, the first of which
   * says whether the workers publish at all.
   */
  eventStream: 'event-stream',
  /**
   * The cutover's finishSync signal to a table that has just failed (CaptureLost found by its
   * last slice) no longer fails the migration as ExternalWorkflowExecutionNotFound: the table's
   * own failure, from its result, is the migration's.
   */
  tableFailureOverSignal: 'table-failure-over-signal',
  /**
   * A run that ends while its events cannot reach the stream (NATS down) hands those still to
   * publish to eventPublisherWorkflow and ends: its result no longer waits for NATS.
   */
  detachedEventPublisher: 'detached-event-publisher',
  /**
   * Online cutover: the drain no longer waits, inside the write outage, for every table workflow
   * to end. Its fences are ahead of any a table hands out, so its first slice of each table takes
   * the table's sync from whatever slice still runs (SyncInput.seal); the tables' own dirty-key
   * re-checks write under the same fence (TableWorkflowInput.fencedRecheck). The tables end
   * beside the drain and are awaited past the point of no return.
   */
  sealedDrain: 'sealed-drain',
  /**
   * A ready table's busy slice does not dwell when it waited for a worker slot longer than
   * SyncInput.crowdedAfterMs (other work is queued behind the syncs), and the table then pauses
   * longer before its next slice (5 s, doubling to timings.maxIdleMs): a hundred busy ready
   * tables held eight slots in turn, and the rest of the migration waited behind them.
   */
  crowdedSync: 'crowded-sync',
  /**
   * Sealed drain: the tables are asked to finish past the point of no return instead of at the
   * freeze's flip. The drain's seals already stop their writes; hundreds of signals sent at the
   * flip went through the server and the worker beside the writers' wait and the drain, inside
   * the write outage.
   */
  tablesAskedAfterOutage: 'tables-asked-after-outage',
  /**
   * The online cutover's steps inside the write outage go to the cutover task queue
   * (cutoverTaskQueue), which every worker polls with slots of its own: at 100 busy tables the
   * wait for writers waited over a second for one of the slots the tables' syncs held.
   */
  cutoverQueue: 'cutover-queue',
  /**
   * Online, a table declared ready for the cutover runs its sync slices and dirty re-checks on
   * the ready task queue (readyTaskQueue), which every worker polls with slots of its own, so that
   * the copies, keys, validations and index builds of the tables not ready yet no longer queue
   * behind them: at 100 busy tables each of those waited about 3 s for a worker slot behind the
   * ready tables' slices, which made most of the time to approval.
   */
  readyQueue: 'ready-queue',
  /**
   * Online, as smallTablesShareSlots in full mode: a small table takes a quarter of a
   * parallelism.tables slot while it copies (workflows/migration/online.ts grantCopySlots), so
   * that four of them copy where one large table would.
   */
  onlineSmallTablesShareSlots: 'online-small-tables-share-slots',
} as const;

export const FerryStateKey = defineSearchAttributeKey('FerryState', SearchAttributeType.KEYWORD);
export const FerryPhaseKey = defineSearchAttributeKey('FerryPhase', SearchAttributeType.KEYWORD);
export const FerrySourceKey = defineSearchAttributeKey('FerrySource', SearchAttributeType.KEYWORD);
export const FerryTargetKey = defineSearchAttributeKey('FerryTarget', SearchAttributeType.KEYWORD);

/** `--search-attribute` arguments for `temporal server start-dev`. */
export const SEARCH_ATTRIBUTES: Record<string, 'Keyword'> = {
  FerryState: 'Keyword',
  FerryPhase: 'Keyword',
  FerrySource: 'Keyword',
  FerryTarget: 'Keyword',
};

/** Environment variable that holds the postgres URL for a connection named in a spec. */
export function connectionEnvVar(name: string): string {
  return `FERRY_CONN_${name.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;
}
