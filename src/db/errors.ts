/**
 * PostgreSQL errors by SQLSTATE (STYLE.md §6): which ones Temporal should retry, which ones no
 * retry can fix. Non-retryable ones become `ApplicationFailure.nonRetryable` with a `type` and
 * the original error as `cause`.
 */
import { ApplicationFailure } from '@temporalio/common';

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
 * Rethrows a database error in the form Temporal understands: fatal SQLSTATEs as a
 * non-retryable ApplicationFailure (type `PostgresError.<code>`), everything else unchanged so
 * the activity's RetryPolicy applies.
 */
export function asActivityFailure(err: unknown, context: string): unknown {
  if (err instanceof ApplicationFailure) return err;
  const code = sqlState(err);
  if (code !== undefined && classify(err) === 'fatal') {
    return ApplicationFailure.create({
      message: `${context}: PostgreSQL error ${code}`,
      type: `PostgresError.${code}`,
      nonRetryable: true,
      cause: err instanceof Error ? err : undefined,
    });
  }
  return err;
}

/** A refusal the operator must fix (bad table, missing key, …): never retried. */
export function refusal(type: string, message: string, cause?: Error): ApplicationFailure {
  return ApplicationFailure.create({ message, type, nonRetryable: true, cause });
}
