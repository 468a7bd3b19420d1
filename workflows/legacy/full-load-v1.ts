/**
 * The end of a full load begun by an older Ferry (before PATCHES.targetReadyBeforeCutover):
 * every secondary index, constraint and foreign key of every table built at the end, by one
 * `finalizeTarget` call (activities/legacy/finalize-target.ts), instead of per table as each is
 * ready. Kept so those executions replay and finish as they began; not used by new ones.
 */
import type { MigrationContext } from '../migration/context';

export async function legacyFinalizeAtTheEnd({ id, spec, plan, acts: { steps } }: MigrationContext) {
  const finalized = await steps.finalizeTarget({ migrationId: id, source: spec.source, target: spec.target, tables: plan.tables });
  return { writtenDuringCopy: finalized.writtenDuringCopy, skippedForeignKeys: finalized.skippedForeignKeys };
}
