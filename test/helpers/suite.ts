/**
 * The set-up almost every suite against real services shares, written once: the suite's own
 * databases (created, seeded, dropped at the end), optionally on a private wal_level=logical
 * cluster; a real Temporal dev server with Ferry workers that know the databases by connection
 * name; and a teardown that stops whatever was started. `stackSuite()` registers it with jest,
 * once for the whole suite or afresh for every test; the tests read `suite.dbs` and
 * `suite.stack`.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DevServerOptions, freePort } from '../../src/dev/dev-server';
import { TestDatabases } from './databases';
import { LogicalCluster, startLogicalCluster } from './logical-cluster';
import { StackOptions, TestStack } from './stack';

export interface StackSuiteOptions {
  /** The tag in the databases' names. */
  name: string;
  /** Role → SQL it is seeded with ('' for an empty database). */
  databases: Record<string, string>;
  /** Connection name → role, as the workers see them (FERRY_CONN_<NAME>); by default each role under its own name. */
  connections?: Record<string, string>;
  /** In-process workers started with the stack (1 by default; 0 where the suite starts its own). */
  workers?: number;
  /** `ferry worker` processes (by identity) started after the stack, each waited for until it polls. */
  workerProcesses?: string[];
  /** The databases on a private wal_level=logical cluster (started once per suite), not on the shared server. */
  logical?: boolean;
  /** A Temporal server the test can stop and start again: a fixed port and a SQLite file, removed at the end. */
  restartableServer?: boolean;
  server?: DevServerOptions;
  extraEnv?: StackOptions['extraEnv'];
  /** Fresh databases and stack for every test rather than one for the whole suite. */
  perTest?: boolean;
  /** How long the set-up may take (jest's hook timeout; the suite's test timeout by default). */
  setUpTimeoutMs?: number;
  /** Seeding beyond SQL (pgbench's tables, a role), after the databases exist and before the stack starts. */
  seed?: (dbs: TestDatabases) => Promise<void>;
  /** Set-up once the stack runs (workers with interceptors or metrics, a receiver, a browser). */
  ready?: (suite: StackSuite) => Promise<void>;
  /** Teardown of what `ready` started; runs before the stack stops. */
  cleanup?: (suite: StackSuite) => Promise<void>;
}

export class StackSuite {
  cluster?: LogicalCluster;
  dbs!: TestDatabases;
  stack!: TestStack;
  private dbFile?: string;

  constructor(readonly options: StackSuiteOptions) {}

  /** The private cluster, where the suite asked for one; once per suite. */
  async startCluster(): Promise<void> {
    if (this.options.logical && !this.cluster) this.cluster = await startLogicalCluster();
  }

  async setUp(): Promise<void> {
    const { options } = this;
    await this.startCluster();
    this.dbs = await TestDatabases.create(options.name, Object.keys(options.databases), this.cluster?.url);
    await Promise.all(Object.entries(options.databases).map(([role, sql]) => (sql ? this.dbs.exec(role, sql) : undefined)));
    await options.seed?.(this.dbs);
    const names = options.connections ?? Object.fromEntries(Object.keys(options.databases).map((role) => [role, role]));
    if (options.restartableServer) this.dbFile = join(tmpdir(), `ferry-${options.name}-${randomBytes(4).toString('hex')}.db`);
    this.stack = await TestStack.start({
      connections: Object.fromEntries(Object.entries(names).map(([name, role]) => [name, this.dbs.url(role)])),
      workers: options.workers,
      extraEnv: options.extraEnv,
      server: { ...options.server, ...(this.dbFile ? { port: await freePort(), dbFile: this.dbFile } : {}) },
    });
    await Promise.all((options.workerProcesses ?? []).map((identity) => this.stack.startWorkerProcessReady(identity)));
    await options.ready?.(this);
  }

  async tearDown(): Promise<void> {
    if (this.stack) await this.options.cleanup?.(this);
    await this.stack?.teardown();
    await this.dbs?.drop();
    if (this.dbFile) for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(`${this.dbFile}${suffix}`, { force: true });
  }

  async stopCluster(): Promise<void> {
    await this.cluster?.stop();
  }
}

/** Registers a StackSuite's set-up and teardown with jest: around the suite, or around each test (`perTest`). */
export function stackSuite(options: StackSuiteOptions): StackSuite {
  return registered(new StackSuite(options));
}

/** Registers an already built suite (a StackSuite or one built on it) with jest. */
export function registered<S extends StackSuite>(suite: S): S {
  const timeout = suite.options.setUpTimeoutMs;
  if (suite.options.perTest) {
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
