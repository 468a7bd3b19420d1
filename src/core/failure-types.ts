/**
 * The types of Ferry's failures, in one place: a failure's `type` is what callers, the status
 * document and the tests match on (`ferry status` shows it, exit code 2 goes with refusals).
 * Pure module: workflows use it. PostgreSQL errors that fail at once carry `PostgresError.<SQLSTATE>`.
 */
export const FAILURE = {
  // Refusals: input or databases that cannot work; nothing runs (exit 2 before a start).
  InvalidSpec: 'InvalidSpec',
  InvalidPlan: 'InvalidPlan',
  PlanNotStored: 'PlanNotStored',
  UnknownConnection: 'UnknownConnection',
  MissingTable: 'MissingTable',
  NotATable: 'NotATable',
  NoPrimaryKey: 'NoPrimaryKey',
  SameTable: 'SameTable',
  SourceInRecovery: 'SourceInRecovery',
  RowSecurity: 'RowSecurity',
  UnsupportedType: 'UnsupportedType',
  UnsupportedTable: 'UnsupportedTable',
  IncompatibleTarget: 'IncompatibleTarget',
  /** The target runs an older PostgreSQL major version than the source. */
  TargetOlderThanSource: 'TargetOlderThanSource',
  TargetNotEmpty: 'TargetNotEmpty',
  TargetTriggersFire: 'TargetTriggersFire',
  AlreadyCaptured: 'AlreadyCaptured',
  LogicalCaptureUnavailable: 'LogicalCaptureUnavailable',
  MissingIndex: 'MissingIndex',
  FreezeMissing: 'FreezeMissing',
  Refused: 'Refused',
  /** objects: all — the objects name roles the target does not have. */
  MissingRole: 'MissingRole',
  /** objects: all — the workers' pg_dump cannot dump the source (missing, or older than its server). */
  DumpUnavailable: 'DumpUnavailable',
  /** cutover.switch: the switch cannot work as given (no switch worker, no entry, session pooling…). */
  SwitchRefused: 'SwitchRefused',
  /** Ferry's own schema on a database was upgraded by a newer Ferry. */
  SchemaTooNew: 'SchemaTooNew',
  // What a running migration can meet.
  Superseded: 'Superseded',
  SchemaChanged: 'SchemaChanged',
  CaptureLost: 'CaptureLost',
  ConsistencyBreach: 'ConsistencyBreach',
  ApprovalTimeout: 'ApprovalTimeout',
  CutoverBlocked: 'CutoverBlocked',
  DeadlineExceeded: 'DeadlineExceeded',
  Cancelled: 'Cancelled',
  // How a migration ended, on its workflow's failure.
  MigrationFailed: 'MigrationFailed',
  MigrationCancelled: 'MigrationCancelled',
  MigrationTimedOut: 'MigrationTimedOut',
  // Change plans (docs/architecture.md §10).
  ChangeRefused: 'ChangeRefused',
  LockBusy: 'LockBusy',
  LockWaitExceeded: 'LockWaitExceeded',
  StepTimedOut: 'StepTimedOut',
  ChangeFailed: 'ChangeFailed',
  ChangeCancelled: 'ChangeCancelled',
  // Callbacks.
  CallbackRejected: 'CallbackRejected',
  CallbackRetryable: 'CallbackRetryable',
  CallbackSecretMissing: 'CallbackSecretMissing',
  CallbackSecretRefused: 'CallbackSecretRefused',
  CallbackTargetRefused: 'CallbackTargetRefused',
  // What the client refuses before anything is sent (exit 2).
  IdInUse: 'IdInUse',
  NothingToRevert: 'NothingToRevert',
  InvalidThrottle: 'InvalidThrottle',
  UnknownMigration: 'UnknownMigration',
  StillRunning: 'StillRunning',
  NotFailed: 'NotFailed',
  NoSpec: 'NoSpec',
  InvalidEnvironment: 'InvalidEnvironment',
} as const;

export type FailureType = (typeof FAILURE)[keyof typeof FAILURE];

/** A PostgreSQL error that fails at once: `PostgresError.<SQLSTATE>`. */
export type PostgresFailureType = `PostgresError.${string}`;

/** Every type a failure of Ferry's carries. */
export type AnyFailureType = FailureType | PostgresFailureType;

const KNOWN = new Set<string>(Object.values(FAILURE));

/** `type` as one of Ferry's failure types, or undefined when it is none (another program's failure). */
export function failureTypeOf(type: string | null | undefined): AnyFailureType | undefined {
  if (!type) return undefined;
  if (KNOWN.has(type)) return type as FailureType;
  return /^PostgresError\.[0-9A-Z]{5}$/.test(type) ? (type as PostgresFailureType) : undefined;
}

/** SQLSTATEs that Ferry's code tells apart by name (PostgreSQL's Appendix A). */
export const SQLSTATE = {
  foreignKeyViolation: '23503',
  exclusionViolation: '23P01',
  /** active_sql_transaction: the statement cannot run inside a transaction block. */
  activeSqlTransaction: '25001',
  /** lock_not_available: the lock_timeout expired while waiting. */
  lockNotAvailable: '55P03',
  /** query_canceled: a statement_timeout, or a cancel from another session. */
  queryCanceled: '57014',
} as const;

/** The type of a PostgreSQL error that fails at once. */
export function postgresFailure(sqlState: string): PostgresFailureType {
  return `PostgresError.${sqlState}`;
}
