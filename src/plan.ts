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

/** A half-open key range [lower, upper); null means unbounded. */
export interface KeyRange {
  lower: Key | null;
  upper: Key | null;
}

export interface ChunkPlan extends KeyRange {
  index: number;
}

export interface TablePlan {
  /** Position in the spec; names the table in bookkeeping and child workflow ids. */
  index: number;
  source: QualifiedName;
  target: QualifiedName;
  /** Copied columns in source order (generated columns excluded: the target computes them). */
  columns: string[];
  keyColumns: KeyColumn[];
  /** binary when every column's binary form is portable between the two databases. */
  copyFormat: 'binary' | 'text';
  /** Compare text keys with COLLATE "C" on both sides (the target's collation differs). */
  keyCollateC: boolean;
  rowsEstimated: number;
  chunks: ChunkPlan[];
  /** The target table existed before the migration (so rollback empties it instead of dropping it). */
  targetExisted: boolean;
  /** n_tup_ins + n_tup_upd + n_tup_del on the source at preflight; full mode warns when it moves. */
  sourceWrites: number;
  /**
   * A prepared target's own triggers and foreign keys (of and to it), each with what it does on
   * Ferry's writes; absent when there are none (and in plans of an older Ferry).
   */
  notes?: string[];
}

/** What copying, syncing and validating one table needs (the plan minus its chunk list). */
export type CopyTable = Pick<TablePlan, 'index' | 'source' | 'target' | 'columns' | 'keyColumns' | 'copyFormat' | 'keyCollateC'>;

export function copyTableOf(t: TablePlan): CopyTable {
  return {
    index: t.index,
    source: t.source,
    target: t.target,
    columns: t.columns,
    keyColumns: t.keyColumns,
    copyFormat: t.copyFormat,
    keyCollateC: t.keyCollateC,
  };
}

export interface MigrationPlan {
  tables: TablePlan[];
  sourceServer: string;
  targetServer: string;
  /**
   * Ferry's sessions on the target may set session_replication_role = replica, so its writes
   * fire no trigger or foreign-key action there (absent in plans of an older Ferry).
   */
  targetReplicaRole?: boolean;
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
