/**
 * Every Ferry connection pins its session (docs/architecture.md §3): the text form of dates, floats,
 * intervals and bytea, which COPY in text format and every checksum depend on, plus an empty
 * search_path (all names are qualified), row_security=off (hidden rows raise an error instead
 * of silently vanishing) and explicit timeouts.
 */
import { ClientBase, ClientConfig } from 'pg';
import { sqlState } from './errors';

export interface SessionTimeouts {
  statementTimeoutMs: number;
  lockTimeoutMs: number;
}

export const DEFAULT_TIMEOUTS: SessionTimeouts = { statementTimeoutMs: 10 * 60_000, lockTimeoutMs: 5_000 };

export const PINNED_SETTINGS: Record<string, string> = {
  DateStyle: 'ISO,YMD',
  IntervalStyle: 'postgres',
  TimeZone: 'UTC',
  extra_float_digits: '3',
  bytea_output: 'hex',
  client_encoding: 'UTF8',
  row_security: 'off',
  search_path: '',
};

function sessionOptions(timeouts: SessionTimeouts): string {
  const settings = {
    ...PINNED_SETTINGS,
    statement_timeout: String(timeouts.statementTimeoutMs),
    lock_timeout: String(timeouts.lockTimeoutMs),
  };
  // libpq "options": -c name=value, with spaces and backslashes escaped by a backslash.
  return Object.entries(settings)
    .map(([name, value]) => `-c ${name}=${value.replace(/[\\ ]/g, (c) => `\\${c}`)}`)
    .join(' ');
}

export function sessionConfig(
  url: string,
  applicationName: string,
  timeouts: SessionTimeouts = DEFAULT_TIMEOUTS,
): ClientConfig {
  return {
    connectionString: url,
    application_name: applicationName,
    options: sessionOptions(timeouts),
    keepAlive: true,
    connectionTimeoutMillis: 10_000,
  };
}

/**
 * Ferry's writes to a target table fire none of its triggers and none of its foreign keys'
 * actions (session_replication_role = replica, as logical replication applies changes): a
 * delete-and-reinsert must not cascade into rows the source never changed, and a child row may
 * land before its parent. Needs superuser or, from PostgreSQL 15, SET privilege on the
 * parameter; without either, false (preflight says what that means for the migration). For a
 * dedicated connection only: the setting stays with the session.
 */
export async function writeAsReplica(db: ClientBase): Promise<boolean> {
  try {
    await db.query('SET session_replication_role = replica');
    return true;
  } catch (err) {
    if (sqlState(err) === '42501') return false;
    throw err;
  }
}
