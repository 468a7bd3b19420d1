/**
 * PostgreSQL errors by SQLSTATE: which ones Temporal should retry, which ones no retry can fix.
 * Non-retryable ones become `ApplicationFailure.nonRetryable` with a `type` and the error as
 * `cause` — its redacted form (redact.ts), because the original can quote row values.
 */
import { ApplicationFailure } from '@temporalio/common';
import { isPostgresError, redacted, redactedRetryable } from './redact';
import { AnyFailureType, postgresFailure } from '../core/failure-types';

/** Exact codes first, then two-character classes. */
const RETRYABLE_CODES = new Set([
  '40001', // serialization_failure
  '40P01', // deadlock_detected
  '55P03', // lock_not_available (lock_timeout)
  '57014', // query_canceled (statement_timeout)
  '57P01', // admin_shutdown (pg_terminate_backend)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (starting up)
  '25006', // read_only_sql_transaction (failover in progress)
]);
const RETRYABLE_CLASSES = new Set(['08', '53', '58']); // connection, resources, system
const NON_RETRYABLE_CLASSES = new Set(['22', '23', '42', '0A', '28', '3D', '3F', '2B', '44']);

const NODE_NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

export type ErrorKind = 'retryable' | 'fatal';

export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * Whether an error of this SQLSTATE may pass by itself: the retryable codes and classes, and a
 * replication slot in use by another session (55006, which the next attempt takes over).
 */
export function isTransientState(code: string): boolean {
  return RETRYABLE_CODES.has(code) || RETRYABLE_CLASSES.has(code.slice(0, 2)) || code === '55006';
}

export function classify(err: unknown): ErrorKind {
  const code = sqlState(err);
  if (code === undefined) return 'retryable'; // network errors, timeouts, terminated connections
  if (RETRYABLE_CODES.has(code)) return 'retryable';
  const cls = code.slice(0, 2);
  if (RETRYABLE_CLASSES.has(cls)) return 'retryable';
  if (NON_RETRYABLE_CLASSES.has(cls)) return 'fatal';
  return 'retryable';
}

export function isNetworkError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && NODE_NETWORK_CODES.has(code);
}

/**
 * Rethrows a database error in the form Temporal understands, without the row values a
 * PostgreSQL error can carry (redact.ts): fatal SQLSTATEs as a non-retryable ApplicationFailure
 * (type `PostgresError.<code>`) whose cause is the redacted error; retryable ones as a retryable
 * ApplicationFailure of the same type with the redacted message, so the activity's RetryPolicy
 * applies and RETRYING shows PostgreSQL's words.
 * Other errors (network, timeouts) carry no row data and pass unchanged.
 */
export function asActivityFailure(err: unknown, context: string): unknown {
  if (err instanceof ApplicationFailure) return withoutRowData(err);
  if (!isPostgresError(err)) return err;
  if (classify(err) === 'retryable') return redactedRetryable(err);
  return ApplicationFailure.create({
    message: `${context}: PostgreSQL error ${err.code}`,
    type: postgresFailure(err.code),
    nonRetryable: true,
    cause: redacted(err),
  });
}

/**
 * The same guarantee for any error leaving an activity (the worker applies it to all of them):
 * a PostgreSQL error anywhere in the cause chain is replaced by its redacted form.
 */
export function withoutRowData(err: unknown, context = 'activity'): unknown {
  if (isPostgresError(err)) return asActivityFailure(err, context);
  if (!(err instanceof Error) || err.cause === undefined) return err;
  const cause = isPostgresError(err.cause) ? redacted(err.cause) : withoutRowData(err.cause, context);
  // Error.cause is an own writable property; Temporal's failures declare it readonly only in their types.
  if (cause !== err.cause) Object.defineProperty(err, 'cause', { value: cause, writable: true, configurable: true });
  return err;
}

/** A refusal the operator must fix (bad table, missing key, …): never retried. */
export function refusal(type: AnyFailureType, message: string, cause?: Error): ApplicationFailure {
  return ApplicationFailure.create({ message, type, nonRetryable: true, cause: isPostgresError(cause) ? redacted(cause) : cause });
}
