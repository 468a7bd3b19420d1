/**
 * Reaching the local PostgreSQL for tests, benchmarks and the demo: connect, and when the
 * server is installed here but stopped, start it with pg_ctlcluster.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Client } from 'pg';
import { PostgresUnreachableError } from '../core/failures';

export const DEFAULT_TEST_PG = 'postgres://postgres@127.0.0.1:5432/postgres';

export async function canConnect(url: string): Promise<Error | null> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return null;
  } catch (err) {
    return err as Error;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Starts the Debian clusters installed here that are down; returns whether it started any. */
function startLocalCluster(report: (line: string) => void): boolean {
  if (!existsSync('/usr/bin/pg_lsclusters') || !existsSync('/usr/bin/pg_ctlcluster')) return false;
  // Lines: version cluster port status owner data-directory log-file.
  const down = spawnSync('pg_lsclusters', ['--no-header'], { encoding: 'utf8' })
    .stdout.split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter((fields) => fields[3] === 'down');
  for (const [version, cluster] of down) {
    report(`ferry: starting the local PostgreSQL ${version} cluster (pg_ctlcluster ${version} ${cluster} start)`);
    spawnSync('pg_ctlcluster', ['--skip-systemctl-redirect', version, cluster, 'start'], { stdio: 'inherit' });
  }
  return down.length > 0;
}

/**
 * Makes sure `url` answers. Throws a message that says how to point Ferry at a server when
 * none can be reached: tests never skip silently.
 */
export async function ensurePostgres(url: string, report: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): Promise<void> {
  let error = await canConnect(url);
  if (!error) return;
  const local = /@(127\.0\.0\.1|localhost)(:\d+)?\//.test(url) || !/@/.test(url);
  if (local && startLocalCluster(report)) {
    for (let i = 0; i < 20 && error; i += 1) {
      await new Promise((r) => setTimeout(r, 500));
      error = await canConnect(url);
    }
    if (!error) return;
  }
  throw new PostgresUnreachableError(
    `PostgreSQL is not reachable at ${url.replace(/:[^:@/]*@/, ':***@')} (${error.message}). ` +
      'Start it, or set FERRY_TEST_PG to a postgres:// URL of a server where this user may create databases.',
  );
}

/** `admin` with its database replaced by `database` (for throwaway databases on one server). */
export function databaseUrl(admin: string, database: string): string {
  return Object.assign(new URL(admin), { pathname: `/${database}` }).toString();
}

/** One-shot SQL on its own connection: the rows of the last statement (scripts and benchmarks). */
export async function runSql(url: string, text: string, params?: unknown[]): Promise<Record<string, unknown>[]> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const result = await client.query(text, params);
    return (Array.isArray(result) ? result[result.length - 1] : result).rows;
  } finally {
    await client.end();
  }
}
