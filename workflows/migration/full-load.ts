/**
 * mode: full — prepareTarget → one tableMigrationWorkflow per table (at most
 * parallelism.tables at once, small tables four to a slot, or — many of them — in groups of one
 * activity each), each copying, validating and building its indexes → foreign keys (added NOT VALID, then validated, parallelism.indexes at a
 * time) and sequence positions.
 * Executions begun by an older Ferry build every index at the end instead (finalizeTarget).
 */
import { runBounded, runWeighted } from './bounded';
import { isSmallTable, TablePlan } from '../../src/core/plan';
import { chunkRateCap } from '../../src/core/rate';
import type { TableProgress } from '../definitions';
import { batchRowsOf, derivePhase, everyTable, MigrationContext, objectSequences, prepareTarget, restoreObjects, startTable } from './context';
import { legacyFinalizeAtTheEnd } from '../legacy/full-load-v1';
import { flags } from '../patches';

/** Small tables (isSmallTable) that copy at once in one `parallelism.tables` slot. */
export const SMALL_PER_SLOT = 4;
/** What a table takes of a `parallelism.tables` slot, in SMALL_PER_SLOTths: a small table one, any other all. */
export function slotWeight(table: TablePlan): number {
  return isSmallTable(table) ? 1 : SMALL_PER_SLOT;
}
/** From this many small tables on, they are copied in groups (PATCHES.smallTableGroups)… */
export const SMALL_GROUP_FROM = 20;
/** …of at most this many tables, a group taking one slot. */
const SMALL_GROUP_MAX = 50;

/** What one slot of the load runs: a table's workflow, or a group of small tables' activity. */
type Work = { table: TablePlan } | { group: TablePlan[] };

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
    // Temporal, not the databases, are what takes the time. Many of them go in groups, a group
    // a slot (PATCHES.smallTableGroups).
    const work = planWork(plan.tables, spec.parallelism.tables);
    const weight = (w: Work) => ('group' in w ? SMALL_PER_SLOT : slotWeight(w.table));
    await runWeighted(work, spec.parallelism.tables * SMALL_PER_SLOT, weight, async (w) => {
      if ('table' in w) return copyTable(w.table);
      for (const table of await copyGroup(ctx, w.group)) await copyTable(table);
    });
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
 * The load's work: a table workflow per table, or — from SMALL_GROUP_FROM small tables on, in
 * executions begun after PATCHES.smallTableGroups — the large tables first, each with its
 * workflow, then the small ones in groups of up to SMALL_GROUP_MAX, sized so that every slot gets
 * a few groups.
 */
function planWork(tables: TablePlan[], slots: number): Work[] {
  const small = tables.filter(isSmallTable);
  if (small.length < SMALL_GROUP_FROM || !flags.smallTableGroups) return tables.map((table) => ({ table }));
  const size = Math.min(SMALL_GROUP_MAX, Math.max(5, Math.ceil(small.length / (slots * 2))));
  const groups: Work[] = [];
  for (let i = 0; i < small.length; i += size) groups.push({ group: small.slice(i, i + size) });
  return [...tables.filter((t) => !isSmallTable(t)).map((table) => ({ table })), ...groups];
}

/**
 * A group of small tables copied, keyed, indexed, analyzed and validated by one activity
 * (copySmallTables); each done table's milestones applied as its workflow would have reported
 * them. Returns the tables it left — one that differed between the sides (its workflow
 * validates and repairs it) or was not small after all (its workflow builds the rest).
 */
async function copyGroup(ctx: MigrationContext, group: TablePlan[]): Promise<TablePlan[]> {
  const { id, spec, tracker } = ctx;
  for (const t of group) tracker.applyProgress({ tableIndex: t.index, phase: 'FULL_MIGRATING' });
  const { tables } = await ctx.acts.steps.copySmallTables({
    migrationId: id,
    source: spec.source,
    target: spec.target,
    tables: group,
    batchRows: batchRowsOf(spec),
    validation: spec.validation,
    fence: Date.now(),
    primaryKey: ctx.primaryKeyAfterLoad,
    rowsPerSecond: chunkRateCap(ctx.control(), 1, 1),
  });
  const left: TablePlan[] = [];
  for (const outcome of tables) {
    const table = group.find((t) => t.index === outcome.index)!;
    if (!outcome.finished || outcome.match === false) {
      left.push(table);
      continue;
    }
    const events: NonNullable<TableProgress['events']> = [
      { type: 'SliceMigrated', detail: { chunk: 0, rows: outcome.rows, bytes: outcome.bytes, done: true } },
      { type: 'TableCopied', detail: { rows: outcome.rows } },
      ...(outcome.match ? [{ type: 'ValidationPassed' as const, detail: { mode: spec.validation, rows: outcome.rows, repairedRanges: 0 } }] : []),
      { type: 'IndexesBuilt', detail: outcome.finished },
    ];
    ctx.progress({ tableIndex: table.index, phase: 'COMPLETED', chunk: { index: 0, state: 'DONE', rowsCopied: outcome.rows, checkpoint: null }, events });
  }
  return left;
}

/**
 * Foreign keys (NOT VALID, then validated, `parallelism.indexes` at once), the second pass of
 * `objects: all` (views, triggers, grants, owners, …), then the target's sequences and completion mark.
 */
async function addForeignKeysAndFinish(ctx: MigrationContext) {
  const { id, spec, acts: { steps } } = ctx;
  const tables = { source: spec.source, target: spec.target, ...everyTable(ctx) };
  const { foreignKeys, skipped } = await steps.addForeignKeys(tables);
  await runBounded(foreignKeys, spec.parallelism.indexes, async (foreignKey) => {
    await steps.validateForeignKey({ target: spec.target, foreignKey });
  });
  // Only plans with objects (a spec's objects: all, which older executions could not have) restore them.
  await restoreObjects(ctx);
  const { writtenDuringCopy } = await steps.finishTarget({ migrationId: id, ...tables, ...objectSequences(ctx) });
  return { writtenDuringCopy, skippedForeignKeys: skipped };
}
