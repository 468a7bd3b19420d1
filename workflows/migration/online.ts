/**
 * mode: online — the source keeps taking writes.
 *   prepareTarget → installCapture (change logs, triggers and the freeze, inactive, before any
 *   row is copied) → every table's workflow copies (parallelism.tables at a time), applies its
 *   change log, validates live, builds its indexes, and keeps syncing → foreign keys → approval
 *   gate → cutover (workflows/migration/cutover.ts).
 */
import { ApplicationFailure, CancellationScope, ChildWorkflowHandle, condition, sleep } from '@temporalio/workflow';
import { capturesLogically } from '../../src/core/plan';
import { slotWeight, SMALL_PER_SLOT } from './full-load';
import { CaptureStream } from './capture-stream';
import { formatDuration } from '../../src/core/duration';
import { innermostApplicationFailure } from '../../src/core/failures';
import { CutoverReport } from '../../src/core/status';
import { runBounded } from './bounded';
import { cleanUpInBackground } from '../cleanup';
import { COPIED, derivePhase, MigrationContext, prepareTarget, restoreObjects, startTable } from './context';
import { cutOver } from './cutover';
import { startCopySignal } from '../definitions';
import { legacyOnlineChain } from '../legacy/online-v1';
import { tableMigrationWorkflow } from './table';
import { FAILURE, postgresFailure, SQLSTATE } from '../../src/core/failure-types';
import { flags } from '../patches';
import { listenForApproval } from './approval';

/** A foreign key that fails its validation while the sync runs may only be behind: tries. */
const FK_VALIDATION_TRIES = 3;
const FK_RETRY_PAUSE_MS = 2_000;

export async function runOnline(ctx: MigrationContext): Promise<CutoverReport> {
  const { id, spec, tracker, saga } = ctx;
  const { steps } = ctx.acts;
  await prepareTarget(ctx);
  const armFreeze = ctx.targetReadyBeforeCutover;
  if (armFreeze) {
    saga.push('releaseSource', async () => {
      // Writes already pass and capture records nothing; a trigger behind a busy lock goes later.
      const { pending } = await steps.releaseSource({ migrationId: id, source: spec.source, freeze: 'remove' });
      if (pending.length > 0) tracker.warnings.push(await cleanUpInBackground({ migrationId: id, source: spec.source, freeze: 'remove' }, pending));
    });
  }
  else saga.push('removeCapture', () => steps.removeCapture({ migrationId: id, source: spec.source }));
  // Plans of an older Ferry carry no capture: triggers, as before.
  const logical = armFreeze && capturesLogically(ctx.plan) && flags.logicalCapture;
  await steps.installCapture({ migrationId: id, source: spec.source, tables: captureTables(ctx), ...(armFreeze ? { armFreeze } : {}), ...(logical ? { logical } : {}) });
  tracker.setPhase('FULL_MIGRATING', 'change capture installed; copying');
  tracker.step('tables');

  // The table workflows live until cutover, so they run in a scope of their own: on failure it
  // is cancelled and every table acknowledges before the compensations run.
  const fanout = new CancellationScope();
  const settled: Promise<unknown>[] = [];
  try {
    return await fanout.run(() => (armFreeze ? onlineChain(ctx, settled, logical) : legacyOnlineChain(ctx, settled)));
  } catch (err) {
    fanout.cancel();
    await Promise.allSettled(settled);
    throw err;
  }
}

function captureTables({ plan }: MigrationContext) {
  return plan.tables.map((t) => ({ index: t.index, source: t.source, keyColumns: t.keyColumns }));
}

async function onlineChain(ctx: MigrationContext, settled: Promise<unknown>[], logical: boolean): Promise<CutoverReport> {
  const { id, spec, plan, tracker } = ctx;
  const cutover = spec.cutover!;
  const handles: ChildWorkflowHandle<typeof tableMigrationWorkflow>[] = [];
  let childFailure: { error: unknown } | undefined;
  // The cutover's drain takes the tables' syncs over without waiting for them to end.
  const sealedDrain = flags.sealedDrain;
  // The slot holds every change from before the first copy; the consumer queues them as keys.
  const capture = logical
    ? new CaptureStream(ctx.acts.stream, { migrationId: id, source: spec.source, tables: captureTables(ctx) }, (error) => {
        childFailure ??= { error };
      })
    : undefined;
  if (capture) settled.push(capture.done);
  // All at once: started one by one, each start would wait for a workflow task of its own.
  await Promise.all(
    plan.tables.map(async (table) => {
      const handle = await startTable(ctx, table, true, { fencedRecheck: sealedDrain });
      handles[table.index] = handle;
      settled.push(
        handle.result().catch((error) => {
          childFailure ??= { error };
        }),
      );
    }),
  );
  const failed = () => {
    if (childFailure) throw childFailure.error;
  };
  await grantCopySlots(ctx, handles, () => childFailure !== undefined);
  failed();
  derivePhase(tracker, spec);

  tracker.step('foreign keys');
  const foreignKeys = await prepareForeignKeys(ctx);
  await restoreObjects(ctx);
  failed();
  tracker.step('approval');
  tracker.setPhase('AWAITING_APPROVAL', cutover.approval === 'auto' ? 'every table caught up and validated' : 'waiting for approveCutover');
  if (cutover.approval === 'manual' || cutover.approval === 'event') {
    // approval: event — a signed message approves too, as the signal does.
    const listening = cutover.approval === 'event' ? listenForApproval(ctx) : undefined;
    const approved = await condition(() => ctx.approved() || childFailure !== undefined, cutover.approvalTimeoutMs);
    await listening?.stop();
    failed();
    if (!approved) {
      throw ApplicationFailure.nonRetryable(
        `the cutover was not approved within ${formatDuration(cutover.approvalTimeoutMs)}; rolled back (approve with \`ferry approve ${id}\`)`,
        FAILURE.ApprovalTimeout,
      );
    }
  }
  return cutOver({ ctx, tables: handles, ...foreignKeys, ...(capture ? { capture } : {}), ...(sealedDrain ? { sealedDrain, failed } : {}) });
}

/**
 * At most parallelism.tables tables copy at once (the others already capture), a small table a
 * quarter of a slot as in full mode (PATCHES.onlineSmallTablesShareSlots: for a table of a few
 * thousand rows the copy's round trips through Temporal take longer than the rows); until all
 * are ready.
 */
async function grantCopySlots(ctx: MigrationContext, handles: ChildWorkflowHandle<typeof tableMigrationWorkflow>[], failed: () => boolean): Promise<void> {
  const { spec, plan, tracker } = ctx;
  const waiting = [...plan.tables.map((t) => t.index)];
  const granted = new Set<number>();
  const shared = flags.onlineSmallTablesShareSlots;
  const weight = (i: number) => (shared ? slotWeight(plan.tables[i]) : 1);
  const slots = spec.parallelism.tables * (shared ? SMALL_PER_SLOT : 1);
  const copying = () => [...granted].filter((i) => !COPIED.has(tracker.tables[i].phase)).reduce((sum, i) => sum + weight(i), 0);
  // (A table heavier than the slots left starts alone, once nothing else copies.)
  const room = () => waiting.length > 0 && (copying() === 0 || copying() + weight(waiting[0]) <= slots);
  const ready = () => tracker.tables.every((t) => t.phase === 'AWAITING_APPROVAL');
  for (;;) {
    while (room()) {
      const index = waiting.shift()!;
      granted.add(index);
      await handles[index].signal(startCopySignal);
    }
    if (failed() || ready()) return;
    await condition(() => failed() || ready() || room());
  }
}

/**
 * Foreign keys while the sync runs: added NOT VALID (a brief lock), then validated. Where the
 * target cannot apply changes as a replica (its foreign keys would fire on the sync's writes),
 * they are added only after the final drain. A validation that fails may only be behind the
 * sync: it is tried again, and then left for after the point of no return.
 */
async function prepareForeignKeys(ctx: MigrationContext) {
  const { spec, plan, tracker } = ctx;
  const { steps } = ctx.acts;
  if (plan.targetReplicaRole === false) return { foreignKeysAfterDrain: true, unvalidatedForeignKeys: [] };
  const { foreignKeys, skipped } = await steps.addForeignKeys({ source: spec.source, target: spec.target, tables: plan.tables });
  for (const fk of skipped) tracker.warnings.push(`foreign key ${fk} not created: the referenced table is not on the target`);
  const unvalidatedForeignKeys: typeof foreignKeys = [];
  await runBounded(foreignKeys, spec.parallelism.indexes, async (foreignKey) => {
    for (let attempt = 1; ; attempt += 1) {
      try {
        await steps.validateForeignKey({ target: spec.target, foreignKey });
        return;
      } catch (err) {
        if (innermostApplicationFailure(err)?.type !== postgresFailure(SQLSTATE.foreignKeyViolation)) throw err;
        if (attempt >= FK_VALIDATION_TRIES) {
          unvalidatedForeignKeys.push(foreignKey);
          return;
        }
        await sleep(FK_RETRY_PAUSE_MS);
      }
    }
  });
  return { foreignKeysAfterDrain: false, unvalidatedForeignKeys };
}
