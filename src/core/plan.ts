/**
 * What preflight learns and decides, carried by the workflows: tables, key columns, the chunk
 * plan. Data, not rows: keys travel as PostgreSQL text values. Pure module: used by workflows.
 */
import { QualifiedName } from './identifiers';

/** A primary-key value: one PostgreSQL text value per key column. */
export type Key = string[];

export interface KeyColumn {
  name: string;
  /** format_type() of the source column, used to cast text key values back. */
  type: string;
  /** A text-like column whose comparisons depend on a collation. */
  collatable: boolean;
}

/**
 * Key types whose equal values are the same value: an upsert need not set such a key column
 * (others — numeric 1.0 and 1.00, a case-insensitive text's case — must be set from the new row).
 */
export const INTEGER_TYPES: ReadonlySet<string> = new Set(['smallint', 'integer', 'bigint']);

/** A half-open key range [lower, upper); null means unbounded. */
export interface KeyRange {
  lower: Key | null;
  upper: Key | null;
}

/**
 * A chunk of the table's key space; for a table without a key (isKeyless), a range of its
 * physical blocks instead, [lower, upper) as one-element keys of block numbers, the last chunk
 * open-ended (the checkpoint's lastKey is then the first block not yet copied).
 */
export interface ChunkPlan extends KeyRange {
  index: number;
}

/** A range validated by one statement per side; it lies inside chunk `chunk`. */
export interface ValidationUnit extends KeyRange {
  chunk: number;
}

export interface TablePlan {
  /** Position in the spec; names the table in bookkeeping and child workflow ids. */
  index: number;
  source: QualifiedName;
  target: QualifiedName;
  /** Copied columns in source order (generated columns excluded: the target computes them). */
  columns: string[];
  /** The key's columns (TableInfo.key); empty for a table without one (isKeyless). */
  keyColumns: KeyColumn[];
  /** binary when every column's binary form is portable between the two databases. */
  copyFormat: 'binary' | 'text';
  /** Compare text keys with COLLATE "C" on both sides (the target's collation differs). */
  keyCollateC: boolean;
  rowsEstimated: number;
  chunks: ChunkPlan[];
  /** Validation ranges sized by rows (absent or empty: one per chunk). */
  validationUnits?: ValidationUnit[];
  /**
   * `blocks`: the copy reads ranges of physical blocks (the chunks are block ranges, ChunkPlan),
   * not of the key — a table without a key, or a large keyed one in full mode (its validation
   * units are then key ranges). `snapshot`: a table without a key in online mode, read whole in
   * one snapshot taken at a known WAL position, in one chunk (src/db/keyless-ops.ts). Absent: key
   * ranges (and in plans of an older Ferry).
   */
  copyBy?: 'blocks' | 'snapshot';
  /** The target table existed before the migration (so rollback empties it instead of dropping it). */
  targetExisted: boolean;
  /** n_tup_ins + n_tup_upd + n_tup_del on the source at preflight; full mode warns when it moves. */
  sourceWrites: number;
  /**
   * A prepared target's own triggers and foreign keys (of and to it), each with what it does on
   * Ferry's writes; absent when there are none (and in plans of an older Ferry).
   */
  notes?: string[];
  /**
   * Index and index-backed constraint names (primary key, unique, exclusion) that are taken in
   * the target schema, by their source name → the free name Ferry gives them on the target table
   * it creates; absent when every name is free (and in plans of an older Ferry).
   */
  targetNames?: Record<string, string>;
}

/**
 * A table with neither a primary key nor a unique index over NOT NULL columns (full mode only):
 * copied by ranges of blocks, validated by an order-independent checksum of each side.
 */
export function isKeyless(t: Pick<TablePlan, 'keyColumns'>): boolean {
  return t.keyColumns.length === 0;
}

/** Whether the table's chunks are ranges of blocks (TablePlan.copyBy). */
export function copiesByBlocks(t: Pick<TablePlan, 'keyColumns' | 'copyBy'>): boolean {
  return t.copyBy === 'blocks' || (isKeyless(t) && t.copyBy !== 'snapshot');
}

/** The name an index or constraint of the source gets on the target (see TablePlan.targetNames). */
export function targetIndexName(table: Pick<TablePlan, 'targetNames'>, sourceName: string): string {
  return (table.targetNames && Object.prototype.hasOwnProperty.call(table.targetNames, sourceName) && table.targetNames[sourceName]) || sourceName;
}

/** What copying, syncing and validating one table needs (the plan minus its chunk list). */
export type CopyTable = Pick<TablePlan, 'index' | 'source' | 'target' | 'columns' | 'keyColumns' | 'copyFormat' | 'keyCollateC' | 'copyBy'>;

/** Estimated rows up to which a table in one chunk is small (isSmallTable). */
export const SMALL_TABLE_ROWS = 100_000;

/**
 * A table in one chunk of at most SMALL_TABLE_ROWS estimated rows. In full mode its copy
 * activity also builds its key and indexes (workflows/migration/table.ts finishesInCopy), and it takes a
 * quarter of a `parallelism.tables` slot (workflows/migration/full-load.ts): for such a table the round
 * trips through Temporal cost more than the work.
 */
export function isSmallTable(t: Pick<TablePlan, 'chunks' | 'rowsEstimated'>): boolean {
  return t.chunks.length === 1 && t.rowsEstimated <= SMALL_TABLE_ROWS;
}

export function copyTableOf(t: TablePlan): CopyTable {
  return {
    index: t.index,
    source: t.source,
    target: t.target,
    columns: t.columns,
    keyColumns: t.keyColumns,
    copyFormat: t.copyFormat,
    keyCollateC: t.keyCollateC,
    ...(t.copyBy ? { copyBy: t.copyBy } : {}),
  };
}

export interface MigrationPlan {
  tables: TablePlan[];
  sourceServer: string;
  targetServer: string;
  /**
   * Each server's `server_version_num` (170004 for 17.4), which the status document carries too.
   * Absent in plans of an older Ferry.
   */
  source?: { serverVersion: number };
  target?: { serverVersion: number };
  /**
   * Ferry's sessions on the target may set session_replication_role = replica, so its writes
   * fire no trigger or foreign-key action there (absent in plans of an older Ferry).
   */
  targetReplicaRole?: boolean;
  /**
   * Online mode: how changes are captured, as preflight resolved the spec's `capture`, and why.
   * Absent in full mode and in plans of an older Ferry (which captured with triggers).
   */
  capture?: CapturePlan;
  /** `objects: all`: what the target gets besides the tables (absent otherwise). */
  objects?: ObjectsPlan;
  /**
   * A plan of more than PLAN_PAGE tables, as the migration's own preflight returns it: the whole
   * plan is stored on the target (the migration's `_ferry.migrations` row) and `tables` is empty
   * here; the workflow loads them page by page (planTables), and the activities that take every
   * table read them there (src/db/stored-plan.ts). `tables` counts them.
   */
  stored?: { tables: number };
  /**
   * The preflight helper's plan of more than PLAN_PAGE tables: `tables` lists the first
   * PLAN_PAGE of them, and this many more were chosen. Not a plan to start from: the migration
   * runs its own preflight, which stores the whole plan.
   */
  moreTables?: number;
}

/**
 * Tables up to which a plan travels whole: a plan of more is stored on the target and travels by
 * reference (MigrationPlan.stored), and the preflight helper lists this many of them (about 360
 * bytes a table of a typical plan: 180 KB, where a Temporal payload may have 2 MB).
 */
export const PLAN_PAGE = 500;

/**
 * Tables of a stored plan the workflow loads at a time (planTables): about 40 KB an event. At 500
 * a table, twenty pages' results in a row made a hundred history events of 4.3 MB, more than a
 * gRPC client takes in one message by default (4 MB): reading the parent's history failed.
 */
export const PLAN_LOAD_PAGE = 100;

/**
 * The chosen schemas' other objects (`objects: all`), as preflight found them in the source's
 * schema dump (src/db/schema-objects.ts): what the dump takes in, and how many entries each pass
 * restores. prepareTarget and restoreObjects dump again: these are what preflight checked.
 */
export interface ObjectsPlan {
  /** The schemas dumped: those of the moved tables. */
  schemas: string[];
  /** The source's extensions, dumped with them. */
  extensions: string[];
  /** Tables of those schemas that the spec does not move: left out of the dump. */
  excludedTables: QualifiedName[];
  /** Entries restored before the tables are created, and after they are loaded. */
  before: number;
  after: number;
  /** Entries by kind (`VIEW`: 3, `FUNCTION`: 12, …), for the plan's reader. */
  kinds: Record<string, number>;
  /** Sequences no column owns: their positions move at the finish (full) or the cutover (online). */
  sequences: QualifiedName[];
}

export interface CapturePlan {
  mode: 'trigger' | 'logical';
  reason: string;
}

/** Logical capture only where the plan says so: plans of an older Ferry captured with triggers. */
export function capturesLogically(plan: MigrationPlan): boolean {
  return plan.capture?.mode === 'logical';
}

/** A chunk's progress, as committed in the target's `_ferry.checkpoints` row. */
export interface ChunkCheckpoint {
  /** Last key copied (inclusive); null before the first batch. */
  lastKey: Key | null;
  rowsCopied: number;
  done: boolean;
}

export function tableLabel(t: { source: QualifiedName }): string {
  return `${t.source.schema}.${t.source.name}`;
}

/** The schema module, loaded on first use (src/core/plan-schema.ts says why). */
const schemas = (): typeof import('./plan-schema') => require('./plan-schema');

/** The plan, or a message naming what is wrong with it. */
export function checkPlan(input: unknown): { ok: true; plan: MigrationPlan } | { ok: false; reason: string } {
  const result = schemas().planSchema.safeParse(input);
  if (result.success) return { ok: true, plan: result.data };
  const issue = result.error.issues[0];
  return { ok: false, reason: `plan.${issue.path.join('.')}: ${issue.message}` };
}

/** A stored plan's tables (MigrationPlan.stored), or a message naming what is wrong with them. */
export function checkTables(input: unknown): { ok: true; tables: TablePlan[] } | { ok: false; reason: string } {
  const result = schemas().planTablesSchema.safeParse(input);
  if (result.success) return { ok: true, tables: result.data };
  const issue = result.error.issues[0];
  return { ok: false, reason: `plan.tables${issue.path.map((p) => `.${String(p)}`).join('')}: ${issue.message}` };
}
