/**
 * Copying by ranges of blocks. Tables without a key — no primary key, no unique index over NOT
 * NULL columns — in full mode:
 * copied by ranges of physical blocks, each batch committed with its checkpoint (the next block),
 * validated by an order-independent checksum of each whole side. Duplicate rows, NULLs, dead rows
 * and holes arrive exactly as they are (the multiset of rows, compared with SQL on both sides),
 * a partitioned one too, nothing repaired; a source changed behind the copy fails the table
 * (nothing can narrow the difference) and rolls back; online mode refuses such a table, naming
 * the fix. A large keyed table in full mode is read by blocks too and validated by key ranges: a
 * row that a write moved past the copy arrives twice, its twins are dropped before the key is
 * built, and validation copies it again.
 */
import type { CopyChunkInput, CopyChunkResult } from '../../activities/copy-chunk';
import type { ChecksumBlocksInput } from '../../activities/validate-chunk';
import { displayQualified } from '../../src/core/identifiers';
import { objectInventory, rowMultiset, TestDatabases } from '../helpers/databases';
import { aroundActivities } from '../helpers/interceptors';
import { expectCleanRun } from '../helpers/repairs';
import { resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SOURCE = `
  CREATE SCHEMA app;
  CREATE TABLE app.events_raw (at timestamptz, kind text, payload jsonb, n int);
  INSERT INTO app.events_raw SELECT timestamptz '2026-01-01' + g * interval '1 minute', 'k' || (g % 13), jsonb_build_object('g', g), g FROM generate_series(1, 40000) g;
  -- Rows that are the same row twice, rows of NULLs, dead rows and holes.
  INSERT INTO app.events_raw SELECT at, kind, payload, n FROM app.events_raw WHERE n % 10 = 0;
  INSERT INTO app.events_raw SELECT NULL, NULL, NULL, NULL FROM generate_series(1, 50);
  DELETE FROM app.events_raw WHERE n % 7 = 0;
  UPDATE app.events_raw SET kind = kind || '!' WHERE n % 11 = 0;
  CREATE INDEX events_raw_at ON app.events_raw (at);
  -- Unique indexes that are no key, built on the target after the load as any other index.
  CREATE TABLE app.loose (a int UNIQUE, b int NOT NULL, c int NOT NULL);
  CREATE UNIQUE INDEX loose_b ON app.loose (b) WHERE b > 0;
  ALTER TABLE app.loose ADD CONSTRAINT loose_c UNIQUE (c) DEFERRABLE;
  INSERT INTO app.loose SELECT CASE WHEN g % 3 = 0 THEN NULL ELSE g END, g, g FROM generate_series(1, 5000) g;
  CREATE TABLE app.metrics (day int NOT NULL, v int) PARTITION BY RANGE (day);
  CREATE TABLE app.metrics_a PARTITION OF app.metrics FOR VALUES FROM (0) TO (100);
  CREATE TABLE app.metrics_b PARTITION OF app.metrics FOR VALUES FROM (100) TO (200);
  INSERT INTO app.metrics SELECT g % 200, g % 17 FROM generate_series(1, 12000) g;
  ANALYZE;`;

const TABLES = ['app.events_raw', 'app.loose', 'app.metrics'];

/** A keyed table large enough to be read by blocks in full mode (more than 100,000 rows). */
const LEDGER = `
  CREATE SCHEMA app;
  CREATE TABLE app.ledger (id bigint PRIMARY KEY, account int NOT NULL, memo text);
  INSERT INTO app.ledger SELECT g, g % 977, md5(g::text) FROM generate_series(1, 150000) g;
  CREATE INDEX ledger_account ON app.ledger (account);
  ANALYZE;`;

/** The table's indexes and constraints as the catalog prints them. */
async function indexes(dbs: TestDatabases, role: string, table: string): Promise<string[]> {
  const rows = await dbs.query<{ line: string }>(
    role,
    `SELECT regexp_replace(pg_get_indexdef(i.indexrelid), ' ON \\S+ ', ' ON … ') AS line FROM pg_index i WHERE i.indrelid = $1::regclass ORDER BY 1`,
    [table],
  );
  return rows.map((r) => r.line);
}

describe('tables without a key', () => {
  let tamper: ((input: ChecksumBlocksInput) => Promise<void>) | undefined;
  /** Batches each copy slice committed, by table. */
  const batches = new Map<string, number>();
  /** Before each copy slice, with its input. */
  let beforeCopy: ((input: CopyChunkInput) => Promise<void>) | undefined;
  /** What each key build returned. */
  const keyBuilds: { built: boolean; twinsDropped?: number }[] = [];

  const suite = stackSuite({
    name: 'keyless',
    databases: { source: SOURCE, target: '', changed_src: SOURCE, changed_dst: '', ledger_src: LEDGER, ledger_dst: '', moved_src: LEDGER, moved_dst: '' },
    connections: { src: 'source', dst: 'target', changed_src: 'changed_src', changed_dst: 'changed_dst', ledger_src: 'ledger_src', ledger_dst: 'ledger_dst', moved_src: 'moved_src', moved_dst: 'moved_dst' },
    workers: 0,
    ready: async () => {
      await suite.stack.startWorker({
        interceptors: aroundActivities({
          checksumBlocks: { before: async (input) => tamper?.(input as ChecksumBlocksInput) },
          addPrimaryKey: { after: async (_input, result) => void keyBuilds.push(result as { built: boolean; twinsDropped?: number }) },
          copyChunk: {
            before: async (input) => beforeCopy?.(input as CopyChunkInput),
            after: async (input, result) => {
              const table = displayQualified((input as CopyChunkInput).table.source);
              batches.set(table, (batches.get(table) ?? 0) + (result as CopyChunkResult).batches);
            },
          },
        }),
      });
    },
  });

  it('plans them by ranges of blocks and says so; online mode refuses them without logical capture, naming the fix', async () => {
    const plan = await suite.stack.ferry.preflight({ source: 'src', target: 'dst', tables: [{ name: 'app.events_raw', chunks: 3 }, 'app.loose'] }, 'keyless-plan');
    const [events, loose] = plan.tables;
    expect(events.keyColumns).toEqual([]);
    expect(events.notes).toContain(
      'no key: copied by ranges of blocks and validated by a checksum of each whole side; a difference fails the table, as it cannot be repaired range by range',
    );
    // Three ranges of blocks, the first from the start and the last to the end.
    const [{ blocks }] = await suite.dbs.query<{ blocks: number }>('source', `SELECT (pg_relation_size('app.events_raw') / 8192)::int AS blocks`);
    expect(events.chunks).toEqual([
      { index: 0, lower: null, upper: [String(Math.floor(blocks / 3))] },
      { index: 1, lower: [String(Math.floor(blocks / 3))], upper: [String(Math.floor((2 * blocks) / 3))] },
      { index: 2, lower: [String(Math.floor((2 * blocks) / 3))], upper: null },
    ]);
    expect(loose.keyColumns).toEqual([]);
    await expect(suite.stack.ferry.preflight({ source: 'src', target: 'dst', mode: 'online', tables: ['app.loose'] }, 'keyless-online')).rejects.toThrow(
      'table app.loose has no primary key and no unique index over NOT NULL columns: online, such a table moves only by logical capture of whole rows ' +
        '(capture: logical or auto, and REPLICA IDENTITY FULL), and logical capture is not possible: wal_level is replica: set wal_level = logical in postgresql.conf and restart the server; ' +
        'app.loose has no key, so its changes must carry whole rows: ALTER TABLE app.loose REPLICA IDENTITY FULL; ' +
        'or add a key (ALTER TABLE app.loose ADD PRIMARY KEY (…)), or move the table in full mode while its writers are stopped (it is then copied by ranges of blocks)',
    );
  });

  it('moves them in full mode: the same multiset of rows, every index, each row copied once, nothing repaired', async () => {
    const { ferry } = suite.stack;
    await ferry.start({ source: 'src', target: 'dst', batchRows: 2000, tables: [{ name: 'app.events_raw', chunks: 3 }, 'app.loose', { name: 'app.metrics', chunks: 2 }] }, { id: 'keyless-full' });
    const result = await resultWithin(ferry, 'keyless-full', 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(ferry, result);
    for (const table of TABLES) {
      const source = await rowMultiset(suite.dbs, 'source', table);
      expect(await rowMultiset(suite.dbs, 'target', table)).toEqual(source);
      // Many batches of about 2,000 rows, by the source's rows per block.
    expect(batches.get('app.events_raw')).toBeGreaterThanOrEqual(15);
    expect(batches.get('app.events_raw')).toBeLessThanOrEqual(40);
    // The checkpoints counted every row once: no batch was copied twice.
      expect({ table, rowsCopied: result.tables.find((t) => t.source === table)!.rowsCopied }).toEqual({ table, rowsCopied: source.rows });
      expect({ table, indexes: await indexes(suite.dbs, 'target', table) }).toEqual({ table, indexes: await indexes(suite.dbs, 'source', table) });
    }
    expect(await rowMultiset(suite.dbs, 'target', 'app.metrics_b')).toEqual(await rowMultiset(suite.dbs, 'source', 'app.metrics_b'));
    // Validation compared the whole sides, by blocks (the event says how many rows it vouched for).
    const passed = result.events.filter((e) => e.type === 'ValidationPassed').map((e) => (e.detail as { repairedRanges: number }).repairedRanges);
    expect(passed).toEqual([0, 0, 0]);
  }, 240_000);

  it('fails a table whose source changed behind the copy, as nothing can narrow the difference, and rolls the target back', async () => {
    const before = await objectInventory(suite.dbs, 'changed_dst');
    tamper = async (input) => {
      if (input.connection !== 'changed_src' || displayQualified(input.relation) !== 'app.events_raw') return;
      tamper = undefined;
      await suite.dbs.exec('changed_src', `UPDATE app.events_raw SET kind = 'changed' WHERE n = 1`);
    };
    const { ferry } = suite.stack;
    await ferry.start({ source: 'changed_src', target: 'changed_dst', tables: [{ name: 'app.events_raw', chunks: 2 }] }, { id: 'keyless-changed' });
    const result = await resultWithin(ferry, 'keyless-changed', 180_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('ConsistencyBreach');
    expect(result.error?.message).toContain(
      'app.events_raw: source and target differ (rows counted and checksummed over each whole side); a table without a key cannot be repaired range by range',
    );
    expect(await objectInventory(suite.dbs, 'changed_dst')).toEqual(before);
  }, 240_000);

  it('reads a large keyed table by blocks in full mode, validates it by key ranges, and needs no repair', async () => {
    const { ferry } = suite.stack;
    const plan = await ferry.preflight({ source: 'ledger_src', target: 'ledger_dst', tables: [{ name: 'app.ledger', chunks: 3 }] }, 'ledger-plan');
    const [ledger] = plan.tables;
    expect(ledger.copyBy).toBe('blocks');
    expect(ledger.notes).toContain('copied by ranges of blocks (read in physical order), validated and repaired by ranges of its key');
    expect(ledger.chunks.map((c) => [c.lower === null, c.upper === null])).toEqual([[true, false], [false, false], [false, true]]);
    // The validation units are ranges of the key that cover it whole, in order.
    const units = ledger.validationUnits!;
    expect(units[0].lower).toBeNull();
    expect(units[units.length - 1].upper).toBeNull();
    units.slice(1).forEach((u, i) => expect(u.lower).toEqual(units[i].upper));
    // A small keyed table, a validation of none, or a prepared target: by the key, as before.
    const none = await ferry.preflight({ source: 'ledger_src', target: 'ledger_dst', validation: 'none', tables: ['app.ledger'] }, 'ledger-none');
    expect(none.tables[0].copyBy).toBeUndefined();

    batches.clear();
    await ferry.start({ source: 'ledger_src', target: 'ledger_dst', batchRows: 5000, tables: [{ name: 'app.ledger', chunks: 3 }] }, { id: 'ledger-full' });
    const result = await resultWithin(ferry, 'ledger-full', 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(ferry, result);
    expect(await rowMultiset(suite.dbs, 'ledger_dst', 'app.ledger')).toEqual(await rowMultiset(suite.dbs, 'ledger_src', 'app.ledger'));
    expect(result.tables[0].rowsCopied).toBe(150_000);
    expect(batches.get('app.ledger')).toBeGreaterThanOrEqual(20);
    expect(await indexes(suite.dbs, 'ledger_dst', 'app.ledger')).toEqual(await indexes(suite.dbs, 'ledger_src', 'app.ledger'));
  }, 240_000);

  it('drops the twins of a row that a write moved past the copy before it builds the key, and validation copies the row again', async () => {
    const { ferry } = suite.stack;
    keyBuilds.length = 0;
    // Chunks one after the other: once the first half of the blocks is copied, row 1 (block 0) is
    // updated; its new version lands in the second half, which is still to be read.
    beforeCopy = async (input) => {
      if (input.migrationId !== 'ledger-moved' || input.chunk.index !== 1) return;
      beforeCopy = undefined;
      await suite.dbs.exec('moved_src', `UPDATE app.ledger SET memo = 'moved' WHERE id = 1`);
    };
    await ferry.start(
      { source: 'moved_src', target: 'moved_dst', batchRows: 5000, parallelism: { chunks: 1 }, tables: [{ name: 'app.ledger', chunks: 2 }] },
      { id: 'ledger-moved' },
    );
    const result = await resultWithin(ferry, 'ledger-moved', 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    const [{ block }] = await suite.dbs.query<{ block: number }>('moved_src', `SELECT (ctid::text::point)[0]::int AS block FROM app.ledger WHERE id = 1`);
    expect(block).toBeGreaterThan(0);
    // Both copies of row 1 were dropped before the key was built, and validation brought it back.
    expect(keyBuilds).toEqual([{ built: true, twinsDropped: 2 }]);
    expect(await rowMultiset(suite.dbs, 'moved_dst', 'app.ledger')).toEqual(await rowMultiset(suite.dbs, 'moved_src', 'app.ledger'));
    expect(await suite.dbs.query('moved_dst', `SELECT memo FROM app.ledger WHERE id = 1`)).toEqual([{ memo: 'moved' }]);
    const passed = result.events.filter((e) => e.type === 'ValidationPassed').map((e) => (e.detail as { repairedRanges: number }).repairedRanges);
    expect(passed).toEqual([1]);
  }, 240_000);
});
