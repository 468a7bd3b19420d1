/**
 * Resolves the connection names a spec uses to postgres URLs held in the worker's environment
 * (`FERRY_CONN_<NAME>`) and keeps one pinned-session pool per name. URLs never leave this
 * module: workflow inputs, histories, logs and errors carry only the names.
 */
import { Client, ClientBase, Pool, PoolClient } from 'pg';
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

/**
 * How long a dedicated session given back stays open for the next activity. Opening a session
 * costs the server a process start and a cold catalog cache — about 40 ms of CPU on the 2-core
 * machine the benches run on, more than copying a small table — and every chunk, sync slice and
 * validation of every table took two of them.
 */
const SESSION_IDLE_MS = 5_000;

/** A dedicated session lent by `ConnectionRegistry.session`: `release` gives it back. */
export interface Session {
  client: PoolClient;
  /**
   * Resets the session (DISCARD ALL: settings back to the pinned ones, temporary tables,
   * session locks and prepared statements gone) and gives it back; with a failure, or when the
   * reset fails (a transaction left open), the session ends instead.
   */
  release(failed?: unknown): Promise<void>;
}

export class ConnectionRegistry {
  private readonly pools = new Map<string, Pool>();
  /** Dedicated sessions given back, by connection name and timeouts. */
  private readonly sessions = new Map<string, Pool>();
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

  /**
   * A dedicated session as `client` gives, taken from the sessions earlier activities gave back
   * when one is idle (opened otherwise: nobody ever waits for one).
   */
  async session(name: string, timeouts?: Partial<SessionTimeouts>): Promise<Session> {
    const settings = { ...this.timeouts, ...timeouts };
    const key = `${name}\u0000${settings.statementTimeoutMs}\u0000${settings.lockTimeoutMs}`;
    let pool = this.sessions.get(key);
    if (!pool) {
      pool = new Pool({ ...sessionConfig(this.url(name), this.applicationName, settings), max: 10_000, idleTimeoutMillis: SESSION_IDLE_MS });
      pool.on('error', () => undefined);
      this.sessions.set(key, pool);
    }
    const client = await pool.connect();
    // The pool listens for errors only on idle sessions: unheard, the server ending a lent one
    // between two queries (pg_terminate_backend, a restart) would crash the worker. Its holder
    // learns of it from the next query, which fails.
    const unheard = () => undefined;
    client.on('error', unheard);
    let released = false;
    return {
      client,
      async release(failed?: unknown) {
        if (released) return;
        released = true;
        if (failed === undefined) {
          try {
            await client.query('DISCARD ALL');
          } catch (err) {
            failed = err;
          }
        }
        // (A failed session is ended: what it was doing when it failed is unknown.)
        if (failed === undefined) client.removeListener('error', unheard);
        client.release(failed === undefined ? undefined : failed instanceof Error ? failed : new Error(String(failed)));
      },
    };
  }

  /** Sessions taken together and given back together (SessionGroup). */
  sessionGroup(timeouts?: Partial<SessionTimeouts>): SessionGroup {
    return new SessionGroup(this, timeouts);
  }

  /**
   * Runs `fn` with a dedicated session on each of `names`; they are given back when it
   * returns and ended when it throws.
   */
  async withSessions<T>(names: string[], timeouts: Partial<SessionTimeouts> | undefined, fn: (...clients: PoolClient[]) => Promise<T>): Promise<T> {
    const group = this.sessionGroup(timeouts);
    return group.run(async () => fn(...(await group.take(names))));
  }

  async withClient<T>(name: string, fn: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool(name).connect();
    // As with a lent session (`session`): heard while lent, learnt of from the next query.
    const unheard = () => undefined;
    client.on('error', unheard);
    let broken: Error | undefined;
    try {
      return await fn(client);
    } catch (err) {
      broken = err as Error;
      throw err;
    } finally {
      // A client whose query failed mid-transaction is discarded rather than reused.
      if (!broken) client.removeListener('error', unheard);
      client.release(broken);
    }
  }

  async close(): Promise<void> {
    const pools = [...this.pools.values(), ...this.sessions.values()];
    this.pools.clear();
    this.sessions.clear();
    await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
  }
}

/**
 * Dedicated sessions taken for one piece of work, maybe in several steps (the sync takes a pair
 * per lane as it needs them): `run` gives every one taken back when its work returns and ends
 * them all when it throws, including those opened beside one that was refused.
 */
export class SessionGroup {
  private readonly taken: Session[] = [];

  constructor(
    private readonly registry: ConnectionRegistry,
    private readonly timeouts: Partial<SessionTimeouts> | undefined,
  ) {}

  /** A session on each of `names`, in order; throws the first refusal. */
  async take(names: string[]): Promise<PoolClient[]> {
    const settled = await Promise.allSettled(names.map((name) => this.registry.session(name, this.timeouts)));
    for (const s of settled) if (s.status === 'fulfilled') this.taken.push(s.value);
    for (const s of settled) if (s.status === 'rejected') throw s.reason;
    return settled.map((s) => (s as PromiseFulfilledResult<Session>).value.client);
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    let failed: unknown;
    try {
      return await fn();
    } catch (err) {
      failed = err ?? new Error('failed');
      throw err;
    } finally {
      await Promise.all(this.taken.map((s) => s.release(failed)));
    }
  }
}

/** Runs fn inside BEGIN/COMMIT on the client, rolling back on any error. */
export async function inTransaction<T>(client: ClientBase, fn: () => Promise<T>): Promise<T> {
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
