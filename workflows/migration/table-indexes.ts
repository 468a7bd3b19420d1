/**
 * A table's target indexes and unique or exclusion constraints, built as soon as the table is
 * loaded and validated — each its own activity, `parallelism.indexes` at a time — then ANALYZE.
 * Online, the table's sync is paused meanwhile (this runs inside its workflow); a transient
 * duplicate left by the sync is evicted by buildIndex and replayed through the change log. An
 * exclusion constraint that meets a transient conflict is retried after a sync round.
 */
import { ApplicationFailure } from '@temporalio/workflow';
import type { IndexRef } from '../../activities/indexes';
import { innermostApplicationFailure } from '../../src/core/failures';
import { postgresFailure, SQLSTATE } from '../../src/core/failure-types';
import { CopyTable, isKeyless, TablePlan } from '../../src/core/plan';
import { TimingsInput, timingsOf } from '../../src/core/timings';
import { runBounded } from './bounded';
import { tableActivities } from '../activity-options';

const EXCLUSION_RETRIES = 5;

export interface IndexBuildInput {
  migrationId: string;
  source: string;
  target: string;
  mode: 'full' | 'online';
  table: TablePlan;
  copyTable: CopyTable;
  parallelism: number;
  /** The table workflow's timings (its heartbeat timeout); absent, production's. */
  timings?: TimingsInput;
}

/** The index builds' activities, as the table's timings configure them. */
const builds = (input: Pick<IndexBuildInput, 'timings'>) => tableActivities(timingsOf(input.timings)).build;

/** `listed`: the source's indexes, when listed already (beside the primary key's build). */
export async function buildTableIndexes(input: IndexBuildInput, syncRound: () => Promise<void>, listed?: IndexRef[]): Promise<{ built: number; evicted: number }> {
  const build = builds(input);
  const indexes = listed ?? (await listSourceIndexes(input));
  let built = 0;
  let evicted = 0;
  let todo: IndexRef[] = indexes;
  for (let attempt = 0; todo.length > 0; attempt += 1) {
    const conflicting: IndexRef[] = [];
    await runBounded(todo, input.parallelism, async (index) => {
      try {
        const result = await build.buildIndex({
          migrationId: input.migrationId,
          source: input.source,
          target: input.target,
          table: input.copyTable,
          index,
          evictDuplicates: input.mode === 'online',
        });
        if (result.built) built += 1;
        evicted += result.evicted;
      } catch (err) {
        if (!transientExclusionConflict(input, index, err) || attempt >= EXCLUSION_RETRIES) throw err;
        conflicting.push(index);
      }
    });
    todo = conflicting;
    if (todo.length > 0) await syncRound();
  }
  await build.analyzeTable({ target: input.target, table: input.table.target });
  return { built, evicted };
}

/** Online, an exclusion constraint can meet rows the sync has not brought up to date yet. */
function transientExclusionConflict(input: IndexBuildInput, index: IndexRef, err: unknown): boolean {
  const failure = innermostApplicationFailure(err);
  return input.mode === 'online' && index.exclusion && failure instanceof ApplicationFailure && failure.type === postgresFailure(SQLSTATE.exclusionViolation);
}

/** The source's secondary indexes and unique or exclusion constraints of the table, to build on the target. */
export async function listSourceIndexes(input: Pick<IndexBuildInput, 'source' | 'table' | 'timings'>): Promise<IndexRef[]> {
  return (await builds(input).listIndexes({ source: input.source, table: input.table })).indexes;
}

/**
 * The key of a table loaded without it, before anything reads the table by key; a table without
 * a key has none to build (plans of executions before keyless tables always had one).
 */
export async function buildPrimaryKey(input: Pick<IndexBuildInput, 'source' | 'target' | 'table' | 'timings'>): Promise<void> {
  if (isKeyless(input.table)) return;
  await builds(input).addPrimaryKey({ source: input.source, target: input.target, table: input.table });
}
