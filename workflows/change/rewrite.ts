/**
 * A rewrite step (docs/architecture.md §10, "Rewrite"): shadow → capture on the original →
 * copy through the expressions → the shadow's foreign keys validated → sync → validation →
 * approval → swap (retried while its lock is busy) → the referencing foreign keys validated,
 * capture removed → the old table kept for keepOld by a helper workflow of its own
 * (workflows/change/rewrite-retire.ts: `ferry revert` within it, then the drop). Until
 * the swap commits, any failure or cancel undoes what was built (capture, shadow) and leaves the
 * original as it was.
 */
import { CancellationScope, condition, ParentClosePolicy, startChild } from '@temporalio/workflow';
import type { SwapResult } from '../../activities/rewrite-swap';
import { rewriteCaptureId, RewriteStep } from '../../src/core/change-plan';
import { rootMessage } from '../../src/core/failures';
import { REWRITE_RETIRE_WORKFLOW, workflowIds } from '../../src/core/names';
import type { ChangeContext } from './context';
import type { ChangeActivities } from '../activity-options';
import { retryWhileLockBusy } from './lock-retry';

/** A sync round leaves at most this many logged rows before validation and the swap. */
const CAUGHT_UP_ROWS = 2_000;
const COPY_BATCH_ROWS = 5_000;

export function runRewrite(ctx: ChangeContext, step: RewriteStep): Promise<void> {
  return new RewriteRun(ctx, step).run();
}

type RewriteData = Omit<Parameters<ReturnType<ChangeActivities['forStep']>['syncRewrite']>[0], 'maxRows'>;

/** One rewrite step: its phases as methods, in the order they run. */
class RewriteRun {
  private readonly acts: ReturnType<ChangeActivities['forStep']>;
  private readonly quick: ChangeActivities['quick'];
  private readonly database: string;
  private readonly ref: { changeId: string; database: string; step: number; table: RewriteStep['table'] };
  private readonly captureId: string;
  /** Until the swap: what undoes each phase that has begun, pushed before it runs (a phase that commits and loses its completion is still undone). */
  private readonly undo: { what: string; run: () => Promise<unknown> }[] = [];
  /** The shadow's own foreign keys, added NOT VALID: validated after the copy. */
  private shadowForeignKeys?: { table: RewriteData['table']; foreignKeys: string[] };
  constructor(
    private readonly ctx: ChangeContext,
    private readonly step: RewriteStep,
  ) {
    this.acts = ctx.acts.forStep(step.timeoutMs);
    this.quick = ctx.acts.quick;
    this.database = ctx.plan.database;
    this.ref = { changeId: ctx.id, database: this.database, step: step.index, table: step.table };
    this.captureId = rewriteCaptureId(ctx.id, step.index);
  }

  async run(): Promise<void> {
    let swap: SwapResult;
    try {
      const data = await this.build();
      await this.copy(data);
      await this.approval(data);
      this.note('swapping');
      swap = await this.swapWithRetries(data);
    } catch (err) {
      await this.undoAll();
      throw err;
    }
    await this.afterSwap(swap);
  }

  private note(text: string): void {
    this.ctx.tracker.steps[this.step.index].note = text;
    this.ctx.tracker.publish();
  }

  /** The shadow with the new shape, and capture on the original. */
  private async build(): Promise<RewriteData> {
    const { step, database } = this;
    this.undo.push({ what: 'drop the shadow', run: () => this.quick.dropRewriteShadow(this.ref) });
    this.note('building the shadow table');
    const prepared = await this.acts.prepareRewrite({ changeId: this.ctx.id, database, step });
    this.undo.push({ what: 'remove capture', run: () => this.quick.releaseSource({ migrationId: this.captureId, source: database, freeze: 'remove' }) });
    await this.acts.installCapture({ migrationId: this.captureId, source: database, tables: [{ index: 0, source: step.table, keyColumns: prepared.key.columns }] });
    this.shadowForeignKeys = { table: prepared.shadow, foreignKeys: prepared.foreignKeys };
    return { ...this.ref, mapping: prepared.mapping, key: prepared.key };
  }

  /** The copy through the expressions, the shadow's foreign keys validated, the log caught up, the validation. */
  private async copy(data: RewriteData): Promise<void> {
    const { tracker } = this.ctx;
    this.note('copying');
    const copied = await this.acts.copyRewrite({ ...data, batchRows: COPY_BATCH_ROWS, rowsPerSecond: tracker.throttle.rowsPerSecond });
    tracker.progress(this.step.index, { done: copied.rows, total: copied.rows, unit: 'rows' });
    const fks = this.shadowForeignKeys;
    if (fks?.foreignKeys.length) await this.acts.validateShadowForeignKeys({ ...this.ref, table: fks.table, foreignKeys: fks.foreignKeys });
    this.note('catching up');
    await this.catchUp(data);
    this.note('validating');
    const valid = await this.acts.validateRewrite(data);
    this.note(`validated ${valid.rows} rows (count and checksum)`);
  }

  /** approval: manual waits for `ferry approve`, syncing once a minute (about ten events a round: days stay far below the history limit). */
  private async approval(data: RewriteData): Promise<void> {
    const { ctx, step } = this;
    if (step.approval !== 'manual') return;
    ctx.tracker.setWaiting(`step ${step.index + 1}: rewrite of ${step.table.schema}.${step.table.name} awaiting approval (ferry approve ${ctx.id})`);
    while (!ctx.approved()) {
      await this.quick.syncRewrite({ ...data, maxRows: 1_000_000 });
      await condition(ctx.approved, '1 minute');
    }
    ctx.tracker.setWaiting(undefined);
    await this.catchUp(data);
  }

  private async undoAll(): Promise<void> {
    await CancellationScope.nonCancellable(async () => {
      for (const u of [...this.undo].reverse()) {
        try {
          await u.run();
        } catch (undoErr) {
          this.ctx.tracker.warnings.push(`step ${this.step.index + 1} (rewrite): could not ${u.what}: ${rootMessage(undoErr)}`);
        }
      }
    });
  }

  /** Past the swap the new table is in place; what follows only tidies up: foreign keys validated, capture off the original, the old table's retirement. */
  private async afterSwap(swap: SwapResult): Promise<void> {
    const { ctx, step, database } = this;
    const { tracker } = ctx;
    tracker.event('RewriteSwapped', step.index, { lockedMs: swap.lockedMs, drained: swap.drained, views: swap.views, foreignKeys: swap.foreignKeys.length });
    this.note(`swapped (writers held ${swap.lockedMs} ms); old table kept ${Math.round(step.keepOldMs / 60_000)} min`);
    await CancellationScope.nonCancellable(async () => {
      try {
        if (swap.foreignKeys.length) await this.acts.validateReferencingForeignKeys({ database, foreignKeys: swap.foreignKeys });
      } catch (err) {
        tracker.warnings.push(`step ${step.index + 1} (rewrite): a foreign key re-added NOT VALID could not be validated: ${rootMessage(err)}`);
      }
      const released = await this.quick.releaseSource({ migrationId: this.captureId, source: database, freeze: 'remove' });
      if (released.pending.length) tracker.warnings.push(`step ${step.index + 1} (rewrite): left for later: ${released.pending.join(', ')}`);
      await startChild(REWRITE_RETIRE_WORKFLOW, {
        workflowId: workflowIds.retire(ctx.id, step.index),
        args: [{ changeId: ctx.id, database, step: step.index, table: step.table, keepOldMs: step.keepOldMs }],
        parentClosePolicy: ParentClosePolicy.ABANDON,
      });
    });
  }

  private async catchUp(data: RewriteData): Promise<void> {
    for (;;) {
      const { left } = await this.acts.syncRewrite({ ...data, maxRows: 200_000 });
      if (left <= CAUGHT_UP_ROWS) return;
    }
  }

  /** The swap, tried again after a backoff (syncing meanwhile) while its lock is busy, up to maxWait. */
  private swapWithRetries(data: RewriteData): Promise<SwapResult> {
    const { step } = this;
    const { tracker } = this.ctx;
    return retryWhileLockBusy(
      {
        what: "the swap's lock",
        maxWaitMs: step.maxWaitMs,
        onAttempt: (n) => (tracker.steps[step.index].attempts = n),
        onWaiting: (n, waiting) => tracker.setWaiting(waiting ? `step ${step.index + 1}: swap lock busy, attempt ${n}` : undefined),
        between: () => this.catchUp(data),
      },
      // Once begun, the swap runs to its commit or rollback: a cancel waits for it.
      () => CancellationScope.nonCancellable(() => this.acts.swapRewrite({ ...data, lockTimeoutMs: step.lockTimeoutMs })),
    );
  }
}
