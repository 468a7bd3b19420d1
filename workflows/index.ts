/** The one workflow bundle entry (docs/architecture.md §2): deterministic orchestration only. */
export { migrationWorkflow } from './migration';
export { tableMigrationWorkflow } from './table';
export { preflightWorkflow } from './preflight';
export { unfreezeWorkflow } from './unfreeze';
export { changeCleanupWorkflow, cleanupWorkflow } from './cleanup';
export { changeWorkflow } from './change';
export { changePreflightWorkflow } from './change-preflight';
export { rewriteRetireWorkflow } from './rewrite-retire';
