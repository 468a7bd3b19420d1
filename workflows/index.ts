/** The one workflow bundle entry (docs/architecture.md §2): deterministic orchestration only. */
export { migrationWorkflow } from './migration/migration';
export { tableMigrationWorkflow } from './migration/table';
export { preflightWorkflow } from './migration/preflight';
export { unfreezeWorkflow } from './migration/unfreeze';
export { changeCleanupWorkflow, cleanupWorkflow } from './cleanup';
export { changeWorkflow } from './change/change';
export { changePreflightWorkflow } from './change/preflight';
export { rewriteRetireWorkflow } from './change/rewrite-retire';
export { eventPublisherWorkflow } from './event-publisher';
