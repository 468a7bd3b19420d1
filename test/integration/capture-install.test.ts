/**
 * Installing capture on a migration's tables, Ferry's activities called directly: each table in a
 * transaction of its own, so a table's writers wait only for its own part (CREATE TRIGGER's
 * lock), not for the whole install — in one transaction, the first of 500 tables had its writes
 * held for seconds — and a retry resumes after the parts that committed. The last part brings
 * the DDL guard over every table; a failed install is removed whole by the release.
 */
import { quoteQualified } from '../../src/core/identifiers';
import { captureNames, triggerNames } from '../../src/db/capture-sql';
import { objectInventory, TestDatabases } from '../helpers/databases';
import { DirectActivities, directActivities } from '../helpers/direct-activities';
import { HeldLock } from '../helpers/kills';
import { eventually } from '../helpers/stack';

const TABLES = 12;
const LAST = TABLES - 1;
const tables = Array.from({ length: TABLES }, (_, i) => ({
  index: i,
  source: { schema: 'public', name: `t${i}` },
  keyColumns: [{ name: 'id', type: 'bigint', collatable: false }],
}));

let dbs: TestDatabases;
let direct: DirectActivities;

beforeAll(async () => {
  dbs = await TestDatabases.create('capture_install', ['source', 'target']);
  await dbs.exec(
    'source',
    tables.map((t) => `CREATE TABLE public.${t.source.name} (id bigint PRIMARY KEY, v text); INSERT INTO public.${t.source.name} VALUES (1, 'a');`).join('\n'),
  );
  direct = directActivities(dbs);
}, 60_000);

afterAll(async () => {
  await direct?.close();
  await dbs?.drop();
});

const install = (migrationId: string, only = tables) => direct.run(() => direct.activities.installCapture({ migrationId, source: 'src', tables: only, armFreeze: true }));
const release = (migrationId: string) => direct.run(() => direct.activities.releaseSource({ migrationId, source: 'src', freeze: 'remove' }));

/** The tables carrying a capture trigger of `migrationId`, by name. */
async function capturedTables(migrationId: string): Promise<string[]> {
  const rows = await dbs.query<{ t: string }>(
    'source',
    `SELECT DISTINCT c.relname AS t FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid WHERE starts_with(g.tgname, $1)`,
    [triggerNames(migrationId).capture],
  );
  return rows.map((r) => r.t).sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
}

/** Until a session of the source database (the install's) waits for a lock. */
async function untilASessionWaitsForALock(): Promise<void> {
  await eventually(
    async () => (await dbs.query('source', "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")).length > 0,
    10_000,
    10,
  );
}

describe('capture installed in parts', () => {
  it("commits each table's capture on its own: while the install waits for the last table's lock, the first is captured and takes writes; a retry finishes from there", async () => {
    // A write left open on the last table: the install's CREATE TRIGGER there waits (2 s lock_timeout), then fails.
    const hold = await HeldLock.take(dbs.url('source'), 'last table', [`UPDATE public.t${LAST} SET v = 'held' WHERE id = 1`]);
    const first = install('parts');
    first.catch(() => undefined);
    let write: string;
    let outcome: string;
    try {
      await untilASessionWaitsForALock();
      // In one transaction the first table's trigger lock would be held until the install ends.
      write = await dbs
        .exec('source', "SET lock_timeout = '500ms'; UPDATE public.t0 SET v = 'during the install' WHERE id = 1")
        .then(() => 'written', (err: Error) => err.message);
      // Held until the install gives up on the last table.
      outcome = await first.then(() => 'installed', (err: Error) => err.message);
    } finally {
      await hold.release();
    }
    expect(write).toBe('written');
    expect(outcome).toMatch(/lock timeout/);
    // The parts before the last stay: their tables captured, the write to t0 in its log.
    expect(await capturedTables('parts')).toEqual(tables.slice(0, LAST).map((t) => t.source.name));
    const logged = await dbs.query('source', `SELECT pk FROM ${quoteQualified(captureNames('parts', 0).log)}`);
    expect(logged).toEqual([{ pk: ['1'] }]);

    await install('parts');
    expect(await capturedTables('parts')).toEqual(tables.map((t) => t.source.name));
    expect(await dbs.query('source', 'SELECT count(*)::int AS n, bool_and(complete) AS complete FROM _ferry_capture.captures WHERE migration_id = $1', ['parts'])).toEqual([
      { n: TABLES, complete: true },
    ]);
    // The retry kept t0's log (and what it had logged) rather than making it again.
    expect(await dbs.query('source', `SELECT pk FROM ${quoteQualified(captureNames('parts', 0).log)}`)).toEqual([{ pk: ['1'] }]);
    // The guard, installed with the last part, covers the first table too.
    const alter = await dbs.exec('source', 'ALTER TABLE public.t0 ADD COLUMN x int').then(() => 'altered', (err: Error) => err.message);
    expect(alter).toMatch(/refused: Ferry migration parts is copying this table online/);
    // Installed already: a third call changes nothing.
    const before = await objectInventory(dbs, 'source');
    await install('parts');
    expect(await objectInventory(dbs, 'source')).toEqual(before);
    await release('parts');
  });

  it("keeps the bookkeeping when another migration is released while this one's install has only its first part", async () => {
    await install('done', [tables[11]]);
    // The first table held: 'early' commits what the tables share, then waits on t0 and gives up.
    const hold = await HeldLock.take(dbs.url('source'), 'first table', ['UPDATE public.t0 SET v = v WHERE id = 1']);
    try {
      const early = install('early', tables.slice(0, 11));
      early.catch(() => undefined);
      await untilASessionWaitsForALock();
      // Waits for the capture lock the waiting part holds, then finds no row but 'done''s own.
      await release('done');
      expect(await early.then(() => 'installed', (err: Error) => err.message)).toMatch(/lock timeout/);
    } finally {
      await hold.release();
    }
    expect(await dbs.query('source', "SELECT to_regclass('_ferry_capture.captures') IS NOT NULL AS kept")).toEqual([{ kept: true }]);
    await install('early', tables.slice(0, 11));
    expect(await capturedTables('early')).toEqual(tables.slice(0, 11).map((t) => t.source.name));
    await release('early');
  });

  it('leaves nothing of an install that failed part way once released: the tables before the failure were captured, the source is as it was', async () => {
    const untouched = await objectInventory(dbs, 'source');
    // Table 5 is captured by another migration: the install stops there (AlreadyCaptured).
    await install('other', [tables[5]]);
    const withOther = await objectInventory(dbs, 'source');
    await expect(install('failing')).rejects.toThrow(/already captured by another online migration/);
    expect(await capturedTables('failing')).toEqual(['t0', 't1', 't2', 't3', 't4']);
    expect(await release('failing')).toEqual({ pending: [] });
    expect(await objectInventory(dbs, 'source')).toEqual(withOther);
    expect(await capturedTables('other')).toEqual(['t5']);
    await release('other');
    expect(await objectInventory(dbs, 'source')).toEqual(untouched);
  });
});
