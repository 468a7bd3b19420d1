/**
 * Resolves the connection names a spec uses to postgres URLs held in the worker's environment
 * (`FERRY_CONN_<NAME>`) and keeps one pinned-session pool per name. URLs never leave this
 * module: workflow inputs, histories, logs and errors carry only the names.
 */
import { Client, Pool, PoolClient } from 'pg';
import { connectionEnvVar } from '../core/names';
import { refusal } from './errors';
import { DEFAULT_TIMEOUTS, sessionConfig, SessionTimeouts } from './session';
import { FAILURE } from '../core/failure-types';

export interface ConnectionRegistryOptions {
  env?: NodeJS.ProcessEnv;
  poolSize?: number;
  timeouts?: SessionTimeouts;
  applicationName?: string;
}

export class ConnectionRegistry {
  private readonly pools = new Map<string, Pool>();
  private readonly env: NodeJS.ProcessEnv;
  private readonly poolSize: number;
  private readonly timeouts: SessionTimeouts;
  private readonly applicationName: string;

  constructor(options: ConnectionRegistryOptions = {}) {
    this.env = options.env ?? process.env;
    this.poolSize = options.poolSize ?? 10;
    this.timeouts = options.timeouts ?? DEFAULT_TIMEOUTS;
    this.applicationName = options.applicationName ?? 'ferry';
  }

  /** The URL for a connection name; a refusal naming the variable to set when it is missing. */
  url(name: string): string {
    const variable = connectionEnvVar(name);
    const url = this.env[variable];
    if (!url) {
      throw refusal(
        FAILURE.UnknownConnection,
        `connection "${name}" is not configured on the workers: set ${variable} to a postgres:// URL in the worker's environment`,
      );
    }
    return url;
  }

  /** A shared pool of pinned sessions for short queries. */
  pool(name: string): Pool {
    let pool = this.pools.get(name);
    if (!pool) {
      pool = new Pool({ ...sessionConfig(this.url(name), this.applicationName, this.timeouts), max: this.poolSize });
      // An idle client that loses its server (restart, pg_terminate_backend) must not crash the worker.
      pool.on('error', () => undefined);
      this.pools.set(name, pool);
    }
    return pool;
  }

  /** A dedicated client outside the pool, for long COPY streams and transactions. */
  async client(name: string, timeouts?: Partial<SessionTimeouts>): Promise<Client> {
    const client = new Client(sessionConfig(this.url(name), this.applicationName, { ...this.timeouts, ...timeouts }));
    client.on('error', () => undefined);
    await client.connect();
    return client;
  }

  async withClient<T>(name: string, fn: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool(name).connect();
    let broken: Error | undefined;
    try {
      return await fn(client);
    } catch (err) {
      broken = err as Error;
      throw err;
    } finally {
      // A client whose query failed mid-transaction is discarded rather than reused.
      client.release(broken);
    }
  }

  async close(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
  }
}

/** Runs fn inside BEGIN/COMMIT on the client, rolling back on any error. */
export async function inTransaction<T>(client: Client | PoolClient, fn: () => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    const result = await fn();
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}
