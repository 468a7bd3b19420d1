/** What the capture and freeze activities are given about a migration's source: contracts shared by those activities and the workflows. */
import { QualifiedName } from './identifiers';
import { KeyColumn } from './plan';

export interface CaptureTable {
  index: number;
  source: QualifiedName;
  keyColumns: KeyColumn[];
}

export interface CaptureInput {
  migrationId: string;
  source: string;
  tables: CaptureTable[];
  /**
   * Install the freeze with capture, inactive, so the cutover freezes by changing a value
   * instead of racing writers for a table lock. Absent in executions of an older Ferry.
   */
  armFreeze?: boolean;
  /**
   * Capture from the write-ahead log (a publication and a slot) instead of row triggers; the
   * change logs, the TRUNCATE refusal, the freeze and the guard are the same. Absent: triggers.
   */
  logical?: boolean;
}

export interface SourceRef {
  migrationId: string;
  source: string;
}
