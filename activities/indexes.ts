/**
 * The target's secondary indexes and unique or exclusion constraints, each built by an activity
 * of its own so that a table's indexes build in parallel across the pool, as soon as that table
 * is loaded (and, online, validated) — never inside the cutover's write outage.
 *
 * listIndexes names what a table needs (definitions are read again from the source catalog by
 * buildIndex: no SQL travels through workflow history). buildIndex creates one; online, where
 * the live sync may have left a transiently duplicated unique value on the target, it evicts
 * the rows that share a value — their keys go back into the change log first, so the sync
 * replays them from the source — and builds again. analyzeTable refreshes the statistics.
 */
import { displayQualified, QualifiedName } from '../src/core/identifiers';
import type { TablePlan } from '../src/core/plan';
import { addPrimaryKeyOn, analyzeOn, buildIndexOn, BuildIndexInput, BuildIndexResult, IndexRef, listIndexesOn, ListIndexesInput } from '../src/db/index-build';
import { ActivityDeps } from './deps';

export type { BuildIndexInput, BuildIndexResult, FinishTable, IndexKind, IndexRef, ListIndexesInput } from '../src/db/index-build';

export function createIndexActivities({ connections, logger }: ActivityDeps) {
  async function listIndexes(input: ListIndexesInput): Promise<{ indexes: IndexRef[] }> {
    return { indexes: await connections.withClient(input.source, (db) => listIndexesOn(db, input.table)) };
  }

  async function buildIndex(input: BuildIndexInput): Promise<BuildIndexResult> {
    return connections.withClient(input.source, (source) => connections.withClient(input.target, (target) => buildIndexOn(source, target, input, logger)));
  }

  async function addPrimaryKey(input: {
    source: string;
    target: string;
    table: Pick<TablePlan, 'source' | 'target' | 'targetNames' | 'copyBy' | 'keyColumns'>;
  }): Promise<{ built: boolean; twinsDropped?: number }> {
    const result = await connections.withClient(input.source, (source) => connections.withClient(input.target, (target) => addPrimaryKeyOn(source, target, input.table)));
    if (result.twinsDropped) {
      logger.warn({ table: displayQualified(input.table.source), twinsDropped: result.twinsDropped }, 'rows read twice by blocks (moved by a write during the copy) dropped before the key build; validation copies their keys again');
    }
    return result;
  }

  async function analyzeTable(input: { target: string; table: QualifiedName }): Promise<void> {
    await connections.withClient(input.target, (db) => analyzeOn(db, input.table));
  }

  return { listIndexes, buildIndex, addPrimaryKey, analyzeTable };
}

