/**
 * mode: full — prepareTarget → one tableMigrationWorkflow per table (at most
 * parallelism.tables at once, small tables four to a slot), each copying, validating and
 * building its indexes → foreign keys (added NOT VALID, then validated, parallelism.indexes at a
 * time) and sequence positions.
 * Executions begun by an older Ferry build every index at the end instead (finalizeTarget).
 */
import { runBounded, runWeighted } from './bounded';
import { isSmallTable, TablePlan } from '../../src/core/plan';
import { derivePhase, MigrationContext, objectSequences, prepareTarget, restoreObjects, startTable } from './context';
import { legacyFinalizeAtTheEnd } from '../legacy/full-load-v1';
import { flags } from '../patches';

/** Small tables (isSmallTable) that copy at once in one `parallelism.tables` slot. */
const SMALL_PER_SLOT = 4;

export async function runFullLoad(ctx: MigrationContext): Promise<void> {
  const { spec, plan, tracker } = ctx;
  await prepareTarget(ctx);
  tracker.setPhase('FULL_MIGRATING', 'target prepared');
  tracker.step('tables');
  const copyTable = async (table: TablePlan) => {
    const child = await startTable(ctx, table, false);
    try {
      const { reports } = await child.result();
      // A small table's milestones come with its result (PATCHES.smallTableReportsInResult).
      for (const report of reports ?? []) ctx.progress({ tableIndex: table.index, ...report });
    } finally {
      ctx.children.delete(table.index);
    }
  };
  if (flags.smallTablesShareSlots) {
    // A small table (one chunk, at most 100,000 estimated rows; its copy activity also builds
    // its key and indexes) takes a quarter of a slot: for such tables the round trips through
    // Temporal, not the databases, are what takes the time.
    await runWeighted(plan.tables, spec.parallelism.tables * SMALL_PER_SLOT, (t) => (isSmallTable(t) ? 1 : SMALL_PER_SLOT), copyTable);
  } else {
    await runBounded(plan.tables, spec.parallelism.tables, copyTable);
  }
  derivePhase(tracker, spec);
  tracker.step('foreign keys');
  const { writtenDuringCopy, skippedForeignKeys } = ctx.targetReadyBeforeCutover ? await addForeignKeysAndFinish(ctx) : await legacyFinalizeAtTheEnd(ctx);
  for (const { table, changes } of writtenDuringCopy) {
    tracker.warnings.push(
      `${table} took about ${changes} row changes while it was copied; validation compared the result, but full mode assumes a quiet source — use mode: online for tables that keep changing`,
    );
  }
  for (const fk of skippedForeignKeys) {
    tracker.warnings.push(`foreign key ${fk} not created: the referenced table is not on the target`);
  }
}

/**
 * Foreign keys (NOT VALID, then validated, `parallelism.indexes` at once), the second pass of
 * `objects: all` (views, triggers, grants, owners, …), then the target's sequences and completion mark.
 */
async function addForeignKeysAndFinish(ctx: MigrationContext) {
  const { id, spec, plan, acts: { steps } } = ctx;
  const tables = { source: spec.source, target: spec.target, tables: plan.tables };
  const { foreignKeys, skipped } = await steps.addForeignKeys(tables);
  await runBounded(foreignKeys, spec.parallelism.indexes, async (foreignKey) => {
    await steps.validateForeignKey({ target: spec.target, foreignKey });
  });
  // Only plans with objects (a spec's objects: all, which older executions could not have) restore them.
  await restoreObjects(ctx);
  const { writtenDuringCopy } = await steps.finishTarget({ migrationId: id, ...tables, ...objectSequences(ctx) });
  return { writtenDuringCopy, skippedForeignKeys: skipped };
}
