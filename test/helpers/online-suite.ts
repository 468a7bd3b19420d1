/**
 * The set-up the online chaos suites share, so each suite reads as its scenario: accounts and
 * items on a source database (on a private wal_level=logical cluster for logical capture), an
 * empty target, and a Temporal stack that knows them as `live` and `next`; the online migration
 * of both tables with manual approval; three writers around the scenario; and the end every
 * scenario expects. `onlineSuite()` registers the set-up and teardown with jest.
 */
import type { ResultDocument } from '../../src/core/status';
import { accounts, items, seedSql } from '../fixtures/seeds';
import { rowsAsText } from './databases';
import { expectCleanRun, expectNothingRepaired } from './repairs';
import { registered, StackSuite } from './suite';
import { startWriters, WriterStats } from './writers';

export interface OnlineSuiteOptions {
  /** The tag in the databases' names. */
  name: string;
  /** Rows seeded into accounts (items always gets 4,000). */
  accounts: number;
  /** Logical capture on a private cluster; trigger capture on the shared test server otherwise. */
  logical?: boolean;
  /** In-process workers to start with the stack (1 by default; 0 where the test starts worker processes to kill). */
  workers?: number;
  /** A Temporal server the test can stop and start again: a fixed port and a SQLite file, removed at the end. */
  restartableServer?: boolean;
}

/** The tables every scenario migrates, with the key that orders them row for row. */
const TABLES = [
  ['public.accounts', 'id'],
  ['public.items', 'a, b'],
] as const;

export class OnlineSuite extends StackSuite {
  constructor(online: OnlineSuiteOptions) {
    super({
      name: online.name,
      databases: { source: seedSql(accounts(online.accounts), items()), target: '' },
      connections: { live: 'source', next: 'target' },
      workers: online.workers,
      logical: online.logical,
      restartableServer: online.restartableServer,
    });
  }

  /** Starts the online migration of accounts and items, to wait for manual approval. */
  start(id: string) {
    return this.stack.ferry.start(
      {
        source: 'live',
        target: 'next',
        mode: 'online',
        ...(this.options.logical ? { capture: 'logical' } : {}),
        cutover: { approval: 'manual', approvalTimeout: '10m' },
        tables: TABLES.map(([table]) => table),
      },
      { id },
    );
  }

  /** Runs the scenario while three writers write to the source; they stop after it, however it ends. */
  async underWriters(scenario: () => Promise<ResultDocument>): Promise<{ result: ResultDocument; writers: WriterStats }> {
    const writers = await startWriters(this.dbs.url('source'), 3);
    try {
      return { result: await scenario(), writers: writers.stats };
    } finally {
      await writers.stop();
    }
  }

  /**
   * The end every scenario expects: SUCCEEDED, no writer error but the expected ones, both tables
   * equal row for row (SQL on both databases) with nothing repaired by validation (a loss it
   * mended would pass the comparison); with logical capture, no slot or publication left.
   */
  async expectCompleted(result: ResultDocument, writers: WriterStats): Promise<void> {
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.otherErrors).toEqual([]);
    for (const [table, key] of TABLES) {
      expect(await rowsAsText(this.dbs, 'target', table, key)).toEqual(await rowsAsText(this.dbs, 'source', table, key));
    }
    expectNothingRepaired(result);
    await expectCleanRun(this.stack.ferry, result);
    if (!this.options.logical) return;
    expect(await this.dbs.query('source', 'SELECT slot_name FROM pg_replication_slots')).toEqual([]);
    expect(await this.dbs.query('source', 'SELECT pubname FROM pg_publication')).toEqual([]);
  }

  /** The position the logical consumer last confirmed (null before the slot exists). */
  async confirmedLsn(): Promise<string | null> {
    return (await this.dbs.query<{ lsn: string | null }>('source', 'SELECT confirmed_lsn::text AS lsn FROM _ferry_capture.slots'))[0]?.lsn ?? null;
  }

  /** Whether position a is past position b (false when either is unknown). */
  async lsnPast(a: string | null, b: string | null): Promise<boolean> {
    return (await this.dbs.query<{ p: boolean | null }>('source', 'SELECT $1::pg_lsn > $2::pg_lsn AS p', [a, b]))[0].p === true;
  }
}

/** An OnlineSuite whose set-up and teardown jest runs before and after the suite's tests. */
export function onlineSuite(options: OnlineSuiteOptions): OnlineSuite {
  return registered(new OnlineSuite(options));
}
