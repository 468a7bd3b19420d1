/**
 * The set-up almost every suite against real services shares, written once: the suite's own
 * databases (created, seeded, dropped at the end), optionally on a private wal_level=logical
 * cluster; a real Temporal dev server (this jest worker's shared one, in a namespace of the
 * suite's own, unless the suite needs its own) with Ferry workers that know the databases by connection
 * name; and a teardown that stops whatever was started. `stackSuite()` registers it with jest,
 * once for the whole suite or afresh for every test; the tests read `suite.dbs` and
 * `suite.stack`.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DevServerOptions, freePort } from '../../src/dev/dev-server';
import { connectionEnvVar } from '../../src/core/names';
import { TestDatabases } from './databases';
import { startLogicalCluster } from './logical-cluster';
import { StackOptions, TestStack, WorkerStartOptions } from './stack';

/** A server of the suite's own for its databases (a private cluster, a streaming pair's primary). */
export interface SuiteServer {
  url: string;
  stop(): Promise<void>;
}

export interface StackSuiteOptions {
  /** The tag in the databases' names. */
  name: string;
  /** Role → SQL it is seeded with ('' for an empty database). */
  databases: Record<string, string>;
  /** Connection name → role, as the workers see them (FERRY_CONN_<NAME>); by default each role under its own name. */
  connections?: Record<string, string>;
  /** Connections that are not a role's plain URL (credentials of their own, another server's databases). */
  connectionUrls?: (dbs: TestDatabases) => Record<string, string>;
  /** In-process workers started with the stack (1 by default; 0 where the suite starts its own). */
  workers?: number;
  /** How those workers are started (metrics, interceptors), asked anew for each one. */
  workerOptions?: () => WorkerStartOptions;
  /** `ferry worker` processes (by identity) started after the stack, each waited for until it polls. */
  workerProcesses?: string[];
  /** The databases on a private wal_level=logical cluster (started once per suite), not on the shared server. */
  logical?: boolean;
  /** The databases on a server the suite starts itself, once (instead of `logical`). */
  server?: () => Promise<SuiteServer>;
  /**
   * Roles whose databases are on servers of their own (other PostgreSQL versions), all started at
   * once, each once: roles given the same function share its server.
   */
  serversByRole?: Record<string, () => Promise<SuiteServer>>;
  /** A Temporal server the test can stop and start again: a fixed port and a SQLite file, removed at the end. */
  restartableServer?: boolean;
  temporal?: DevServerOptions;
  /** A Temporal server of the suite's own though `temporal` sets nothing (StackOptions.ownServer). */
  ownServer?: boolean;
  extraEnv?: StackOptions['extraEnv'];
  /**
   * What each test gets afresh: nothing (one set-up for the suite, the default), everything
   * (`true`), or only the databases (`'databases'`: one stack, whose in-process workers are
   * restarted to see each test's databases).
   */
  perTest?: boolean | 'databases';
  /** How long the set-up may take (jest's hook timeout; the suite's test timeout by default). */
  setUpTimeoutMs?: number;
  /** Seeding beyond SQL (pgbench's tables, a role), after the databases exist and before the stack starts. */
  seed?: (dbs: TestDatabases) => Promise<void>;
  /** Set-up once the stack runs (workers with interceptors or metrics, a receiver, a browser). */
  ready?: (suite: StackSuite) => Promise<void>;
  /** Teardown of what `ready` started; runs before the stack stops. */
  cleanup?: (suite: StackSuite) => Promise<void>;
  /** Teardown after the databases are dropped (a role they granted to). */
  afterDrop?: () => Promise<void>;
}

export class StackSuite {
  cluster?: SuiteServer;
  /** The servers of `serversByRole`, by role. */
  roleServers: Record<string, SuiteServer> = {};
  /** Each of those servers once. */
  private servers: SuiteServer[] = [];
  dbs!: TestDatabases;
  stack!: TestStack;
  private dbFile?: string;

  constructor(readonly options: StackSuiteOptions) {}

  /** The suite's own database server, where it asked for one; once per suite. */
  async startCluster(): Promise<void> {
    const byRole = Object.entries(this.options.serversByRole ?? {}).filter(([role]) => !this.roleServers[role]);
    const starting = new Map<() => Promise<SuiteServer>, Promise<SuiteServer>>();
    for (const [, start] of byRole) if (!starting.has(start)) starting.set(start, start());
    const started = await Promise.allSettled(starting.values());
    for (const [role, start] of byRole) {
      const server = started[[...starting.keys()].indexOf(start)];
      if (server.status === 'fulfilled') this.roleServers[role] = server.value;
    }
    this.servers.push(...started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : [])));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    if (this.cluster) return;
    if (this.options.server) this.cluster = await this.options.server();
    else if (this.options.logical) this.cluster = await startLogicalCluster();
  }

  async setUp(): Promise<void> {
    await this.startCluster();
    await this.createDatabases();
    await this.startStack(this.connectionUrls());
    await this.whenReady();
  }

  /** Only the databases afresh (`perTest: 'databases'`): the in-process workers restart to see them. */
  async setUpDatabases(): Promise<void> {
    await this.createDatabases();
    await this.stack.stopInProcessWorkers();
    for (const [name, url] of Object.entries(this.connectionUrls())) this.stack.env[connectionEnvVar(name)] = url;
    for (let i = 0; i < (this.options.workers ?? 1); i += 1) await this.stack.startWorker(this.options.workerOptions?.());
  }

  async tearDown(): Promise<void> {
    if (this.stack) await this.options.cleanup?.(this);
    await this.stack?.teardown();
    await this.dropDatabases();
    if (this.dbFile) for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${this.dbFile}${suffix}`, { force: true });
  }

  async dropDatabases(): Promise<void> {
    await this.dbs?.drop();
    await this.options.afterDrop?.();
  }

  async stopCluster(): Promise<void> {
    await this.cluster?.stop();
    await Promise.all(this.servers.map((server) => server.stop()));
  }

  private async createDatabases(): Promise<void> {
    const { options } = this;
    const servers = Object.fromEntries(Object.entries(this.roleServers).map(([role, server]) => [role, server.url]));
    this.dbs = await TestDatabases.create(options.name, Object.keys(options.databases), this.cluster?.url, servers);
    await Promise.all(Object.entries(options.databases).map(([role, sql]) => (sql ? this.dbs.exec(role, sql) : undefined)));
    await options.seed?.(this.dbs);
  }

  private connectionUrls(): Record<string, string> {
    const { options } = this;
    const names = options.connections ?? Object.fromEntries(Object.keys(options.databases).map((role) => [role, role]));
    return {
      ...Object.fromEntries(Object.entries(names).map(([name, role]) => [name, this.dbs.url(role)])),
      ...options.connectionUrls?.(this.dbs),
    };
  }

  /** The stack, with the given connections (none yet where the databases come per test). */
  async startStack(connections: Record<string, string>): Promise<void> {
    const { options } = this;
    if (options.restartableServer) this.dbFile = join(tmpdir(), `ferry-${options.name}-${randomBytes(4).toString('hex')}.db`);
    this.stack = await TestStack.start({
      connections,
      workers: options.perTest === 'databases' ? 0 : options.workers,
      workerOptions: options.workerOptions,
      extraEnv: options.extraEnv,
      ownServer: options.ownServer,
      server: { ...options.temporal, ...(this.dbFile ? { port: await freePort(), dbFile: this.dbFile } : {}) },
    });
  }

  private async whenReady(): Promise<void> {
    await Promise.all((this.options.workerProcesses ?? []).map((identity) => this.stack.startWorkerProcessReady(identity)));
    await this.options.ready?.(this);
  }
}

/** Registers a StackSuite's set-up and teardown with jest (see `perTest`). */
export function stackSuite(options: StackSuiteOptions): StackSuite {
  return registered(new StackSuite(options));
}

/** Registers an already built suite (a StackSuite or one built on it) with jest. */
export function registered<S extends StackSuite>(suite: S): S {
  const timeout = suite.options.setUpTimeoutMs;
  if (suite.options.perTest === 'databases') {
    beforeAll(async () => {
      await suite.startCluster();
      await suite.startStack({});
    }, timeout);
    beforeEach(() => suite.setUpDatabases(), timeout);
    afterEach(() => suite.dropDatabases());
    afterAll(async () => {
      await suite.stack?.teardown();
      await suite.stopCluster();
    });
  } else if (suite.options.perTest) {
    beforeAll(() => suite.startCluster(), timeout);
    beforeEach(() => suite.setUp(), timeout);
    afterEach(() => suite.tearDown());
    afterAll(() => suite.stopCluster());
  } else {
    beforeAll(() => suite.setUp(), timeout);
    afterAll(async () => {
      await suite.tearDown();
      await suite.stopCluster();
    });
  }
  return suite;
}
