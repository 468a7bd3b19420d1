/** The spec's bounds and defaults (a module without zod: workflows read them without loading the schema). */
export const BATCH_ROWS = { min: 100, max: 1_000_000 };
/**
 * Without batchRows (spec or throttle), a copy batch holds about this much of the table: narrow
 * rows get batches of a few hundred thousand (fewer commits and key lookups), wide rows small
 * ones (a bounded transaction and redo after a failure). See src/core/batch-size.ts. 64 MB, not
 * 32: a COPY statement into a table still smaller than the server's shared buffers loaded slower
 * per row the smaller it was; two bare streams took 5-7% less time in batches of 64 MB, whole
 * migrations 2-3% less (docs/benchmarks.md).
 */
export const BATCH_BYTES = 64 * 1024 * 1024;
export const CHUNKS = { min: 1, max: 256 };
// Two chunks at a time per table measured fastest with source and target sharing 2 cores
// (bench/copy.ts); raise parallelism.chunks when the databases have cores to spare.
export const PARALLELISM = { tables: 2, chunks: 2, indexes: 2, apply: 1, max: 64 };
/** Sessions applying one table's changes at once: each lane holds one on each side. */
export const MAX_APPLY_LANES = 16;
export const MAX_METADATA_BYTES = 16 * 1024;
/**
 * Tables one migration moves: full mode copies many small tables in groups (one activity a group,
 * workflows/migration/full-load.ts) and keeps a plan of more than a page on the target
 * (MigrationPlan.stored), measured at 10,000; online, every table has a workflow of its own until
 * the cutover.
 */
export const MAX_TABLES = 10_000;
export const MAX_ONLINE_TABLES = 500;
/**
 * Callback secrets are read only from worker variables with this prefix: a spec must not make
 * the workers sign a body it knows with FERRY_CONN_… or TEMPORAL_API_KEY (an HMAC oracle).
 */
export const CALLBACK_SECRET_NAME = /^FERRY_SECRET_[A-Z0-9_]{1,115}$/;
