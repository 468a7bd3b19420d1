/**
 * The online chain of executions begun by an older Ferry (before PATCHES.targetReadyBeforeCutover):
 * plain indexes before the approval, then at cutover the tables stop syncing, the freeze is a
 * CREATE TRIGGER (a lock race), and unique constraints, foreign keys and ANALYZE run after it.
 * Kept verbatim so those executions replay and finish as they began; not used by new ones.
 */
import { ApplicationFailure, CancellationScope, ChildWorkflowHandle, condition } from '@temporalio/workflow';
import { formatDuration } from '../../src/core/duration';
import { copyTableOf } from '../../src/core/plan';
import { CutoverReport } from '../../src/core/status';
import { COPIED, derivePhase, MigrationContext, startTable } from '../migration/context';
import { finishSyncSignal, startCopySignal } from '../definitions';
import { SLICE_MS, SYNC_BATCH_KEYS, tableMigrationWorkflow } from '../migration/table';
import { FAILURE } from '../../src/core/failure-types';

function captureTables({ plan }: MigrationContext) {
  return plan.tables.map((t) => ({ index: t.index, source: t.source, keyColumns: t.keyColumns }));
}

export async function legacyOnlineChain(ctx: MigrationContext, settled: Promise<unknown>[]): Promise<CutoverReport> {
  const { id, spec, plan, tracker, saga } = ctx;
  const { drain, steps } = ctx.acts;
  const cutover = spec.cutover!;
  const handles: ChildWorkflowHandle<typeof tableMigrationWorkflow>[] = [];
  let childFailure: { error: unknown } | undefined;
  for (const table of plan.tables) {
    const handle = await startTable(ctx, table, true);
    handles[table.index] = handle;
    settled.push(
      handle.result().catch((error) => {
        childFailure ??= { error };
      }),
    );
  }

  // Copy slots: at most parallelism.tables tables copy at once; the others already capture.
  const waiting = [...plan.tables.map((t) => t.index)];
  const granted = new Set<number>();
  const copying = () => [...granted].filter((i) => !COPIED.has(tracker.tables[i].phase)).length;
  const ready = () => tracker.tables.every((t) => t.phase === 'AWAITING_APPROVAL');
  const failed = () => {
    if (childFailure) throw childFailure.error;
  };
  for (;;) {
    while (waiting.length > 0 && copying() < spec.parallelism.tables) {
      const index = waiting.shift()!;
      granted.add(index);
      await handles[index].signal(startCopySignal);
    }
    failed();
    if (ready()) break;
    await condition(() => childFailure !== undefined || ready() || (waiting.length > 0 && copying() < spec.parallelism.tables));
  }
  derivePhase(tracker, spec);

  // Plain indexes cannot be violated by a live sync: build them now, outside the write outage.
  await steps.finalizeTarget({ migrationId: id, source: spec.source, target: spec.target, tables: plan.tables, part: 'indexes' });
  tracker.setPhase('AWAITING_APPROVAL', cutover.approval === 'auto' ? 'every table caught up and validated' : 'waiting for approveCutover');
  if (cutover.approval === 'manual') {
    const approved = await condition(() => ctx.approved() || childFailure !== undefined, cutover.approvalTimeoutMs);
    failed();
    if (!approved) {
      throw ApplicationFailure.nonRetryable(
        `the cutover was not approved within ${formatDuration(cutover.approvalTimeoutMs)}; rolled back (approve with \`ferry approve ${id}\`)`,
        FAILURE.ApprovalTimeout,
      );
    }
  }

  tracker.setPhase('CUTTING_OVER', cutover.approval === 'auto' ? 'approved automatically' : 'approved');
  tracker.event('CutoverStarted');
  // Tables stop syncing first (a slice stuck on a dead worker must not lengthen the outage);
  // whatever they leave in the logs is drained below, after the freeze.
  for (const handle of handles) await handle.signal(finishSyncSignal);
  await Promise.all(handles.map((h) => h.result()));
  saga.push('unfreezeSource', () => steps.unfreezeSource({ migrationId: id, source: spec.source }));
  const { frozenAt } = await steps.freezeSource({ migrationId: id, source: spec.source, tables: captureTables(ctx) });

  // Frozen: the logs can only shrink. Drain them, then prove the changed rows equal.
  let dirtyChecked = 0;
  for (const table of plan.tables) {
    const copyTable = copyTableOf(table);
    const drainAll = async () => {
      for (;;) {
        const r = await drain.syncChanges({
          migrationId: id,
          source: spec.source,
          target: spec.target,
          table: copyTable,
          fence: Date.now(),
          sliceMs: SLICE_MS,
          batchKeys: SYNC_BATCH_KEYS,
          recordDirty: spec.validation !== 'none',
          returnWhenCaughtUp: true,
        });
        if (r.caughtUp && r.pending === 0) return;
      }
    };
    await drainAll();
    if (spec.validation === 'none') continue;
    let check = await drain.checkDirtyKeys({ migrationId: id, source: spec.source, target: spec.target, table: copyTable });
    if (check.mismatched > 0) {
      await drainAll();
      check = await drain.checkDirtyKeys({ migrationId: id, source: spec.source, target: spec.target, table: copyTable });
    }
    dirtyChecked += check.checked;
    if (check.mismatched > 0 || check.remaining > 0) {
      tracker.event('ConsistencyBreach', tracker.tables[table.index].source, { mismatched: check.mismatched, remaining: check.remaining });
      throw ApplicationFailure.nonRetryable(
        `${tracker.tables[table.index].source}: ${check.mismatched || check.remaining} changed row(s) still differ after the final drain`,
        FAILURE.ConsistencyBreach,
      );
    }
  }

  const finalized = await steps.finalizeTarget({ migrationId: id, source: spec.source, target: spec.target, tables: plan.tables, part: 'constraints' });
  for (const fk of finalized.skippedForeignKeys) tracker.warnings.push(`foreign key ${fk} not created: the referenced table is not on the target`);

  // Point of no return: the target is authoritative.
  saga.clear();
  const writeOutageMs = Date.now() - Date.parse(frozenAt);
  tracker.completeTables();
  tracker.event('CutoverCompleted', undefined, { writeOutageMs, dirtyRowsChecked: dirtyChecked, afterwards: cutover.afterwards });
  await CancellationScope.nonCancellable(async () => {
    try {
      await steps.removeCapture({ migrationId: id, source: spec.source });
    } catch {
      tracker.warnings.push(`change capture could not be removed from the source; run \`ferry unfreeze ${id}\` after fixing the source`);
    }
    if (cutover.afterwards === 'unfreeze') await steps.unfreezeSource({ migrationId: id, source: spec.source });
  });
  return { frozenAt, writeOutageMs, dirtyRowsChecked: dirtyChecked, afterwards: cutover.afterwards };
}
