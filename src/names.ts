/**
 * Names other programs rely on (DESIGN.md §3). Keep them stable: the `temporal` CLI, Go and
 * Python services and the Web UI address Ferry through these strings.
 * Pure module: imported by workflows, so no Node APIs here.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const DEFAULT_TASK_QUEUE = 'ferry';

export const MIGRATION_WORKFLOW = 'migrationWorkflow';
export const TABLE_WORKFLOW = 'tableMigrationWorkflow';
/** Internal helper workflows (not migrations; `ferry list` hides them). */
export const PREFLIGHT_WORKFLOW = 'preflightWorkflow';
export const UNFREEZE_WORKFLOW = 'unfreezeWorkflow';
export const HELPER_WORKFLOW_TYPES = [PREFLIGHT_WORKFLOW, UNFREEZE_WORKFLOW];

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
