/**
 * Validation by shares of blocks (checksumBlocks): a side's shares, however many, add up to the
 * count and checksum of the whole table, each read through a TID range scan (never the whole
 * table again), and a partitioned table is read whole by its first share. Checked against
 * PostgreSQL's own count and sum over the table, and on a target that differs by one value.
 */
import { Client } from 'pg';
import { blockShare, ChecksumBlocksResult } from '../../activities/validate-chunk';
import { blockShareSql } from '../../src/db/summaries';
import { copyTableOf, CopyTable, MigrationPlan } from '../../src/core/plan';
import { parseSpec } from '../../src/core/spec';
import { TestDatabases } from '../helpers/databases';
import { DirectActivities, directActivities } from '../helpers/direct-activities';

describe('validation by shares of blocks', () => {
  let dbs: TestDatabases;
  let direct: DirectActivities;
  let plan: MigrationPlan;

  beforeAll(async () => {
    dbs = await TestDatabases.create('blockval', ['source', 'target']);
    const schema = `CREATE TABLE public.items (id int PRIMARY KEY, label text, amount numeric(12,2), at timestamptz);
       CREATE TABLE public.parts (id int PRIMARY KEY, label text) PARTITION BY RANGE (id);
       CREATE TABLE public.parts_a PARTITION OF public.parts FOR VALUES FROM (MINVALUE) TO (5000);
       CREATE TABLE public.parts_b PARTITION OF public.parts FOR VALUES FROM (5000) TO (MAXVALUE);`;
    const rows = `INSERT INTO public.items SELECT g, 'item ' || g, g * 1.25, timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series(1, 60000) g;
       -- Holes and dead rows, as a table that lived has them.
       DELETE FROM public.items WHERE id % 7 = 0;
       UPDATE public.items SET label = label || '!' WHERE id % 11 = 0;
       INSERT INTO public.parts SELECT g, 'part ' || g FROM generate_series(1, 9000) g;`;
    await dbs.exec('source', `${schema} ${rows} ANALYZE;`);
    // The target holds the same rows, laid out differently (inserted in reverse), and one value off.
    await dbs.exec(
      'target',
      `${schema}
       INSERT INTO public.items SELECT g, 'item ' || g, g * 1.25, timestamptz '2026-01-01' + g * interval '1 minute' FROM generate_series(60000, 1, -1) g WHERE g % 7 <> 0;
       UPDATE public.items SET label = label || '!' WHERE id % 11 = 0;
       UPDATE public.items SET amount = amount + 0.01 WHERE id = 4321;
       INSERT INTO public.parts SELECT g, 'part ' || g FROM generate_series(1, 9000) g;
       ANALYZE;`,
    );
    direct = directActivities(dbs);
    plan = await direct.run(() => direct.activities.preflight({ migrationId: 'blocks', spec: parseSpec({ source: 'src', target: 'dst', tables: ['public.items', 'public.parts'], truncate: true }) }));
  });

  afterAll(async () => {
    await direct?.close();
    await dbs?.drop();
  });

  const table = (name: string): CopyTable => copyTableOf(plan.tables.find((t) => t.source.name === name)!);

  /** Every share of one side, added up. */
  async function sides(name: string, side: 'source' | 'target', units: number): Promise<{ rows: number; sum: bigint; shares: ChecksumBlocksResult[] }> {
    const t = table(name);
    const shares: ChecksumBlocksResult[] = [];
    for (let unit = 0; unit < units; unit += 1) {
      shares.push(await direct.run(() => direct.activities.checksumBlocks({ connection: side === 'source' ? 'src' : 'dst', relation: side === 'source' ? t.source : t.target, table: t, mode: 'checksum', unit, units })));
    }
    return { rows: shares.reduce((n, s) => n + s.rows, 0), sum: shares.reduce((n, s) => n + BigInt(s.sum), BigInt(0)), shares };
  }

  /** PostgreSQL's own count and sum of the rows' hashes, over the whole table in one statement. */
  async function whole(side: 'source' | 'target', name: string): Promise<{ rows: number; sum: bigint }> {
    const [row] = await dbs.query(side, `SELECT count(*)::int AS rows, sum(hashtextextended(ROW(id, label${name === 'items' ? ', amount, at' : ''})::text, 0))::text AS sum FROM public.${name}`);
    return { rows: row.rows as number, sum: BigInt(row.sum as string) };
  }

  it.each([1, 2, 3, 7])('adds up, in %i share(s), to the whole table, each share its own blocks', async (units) => {
    const expected = await whole('source', 'items');
    const got = await sides('items', 'source', units);
    expect({ rows: got.rows, sum: got.sum }).toEqual(expected);
    expect(expected.rows).toBe(60000 - Math.floor(60000 / 7));
    if (units > 1) {
      // Consecutive, non-overlapping block ranges from 0 to the end.
      expect(got.shares[0].blocks?.[0]).toBe(0);
      for (let u = 1; u < units; u += 1) expect(got.shares[u].blocks?.[0]).toBe(got.shares[u - 1].blocks?.[1]);
      expect(got.shares[units - 1].blocks?.[1]).toBeNull();
      expect(got.shares.every((s) => s.rows > 0)).toBe(true);
    }
  });

  it('reads a share by a TID range scan, without parallel workers reading the rest', async () => {
    const t = table('items');
    const [{ blocks }] = await dbs.query('source', `SELECT pg_relation_size('public.items') / current_setting('block_size')::int8 AS blocks`);
    const share = blockShare(Number(blocks), 1, 3, true)!;
    // As the activity runs it: in a transaction without parallel workers.
    const client = new Client({ connectionString: dbs.url('source') });
    await client.connect();
    let lines: Record<string, unknown>[];
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL max_parallel_workers_per_gather = 0');
      lines = (await client.query(`EXPLAIN ${blockShareSql(t, t.source, 'checksum', share)}`)).rows;
      await client.query('ROLLBACK');
    } finally {
      await client.end();
    }
    expect(lines.map((l) => Object.values(l)[0]).join('\n')).toMatch(/Tid Range Scan on items/);
  });

  it('finds the target one value off, however its rows lie, and equal where they are equal', async () => {
    const source = await sides('items', 'source', 3);
    const target = await sides('items', 'target', 2);
    expect(target.rows).toBe(source.rows);
    expect(target.sum).not.toBe(source.sum);
    await dbs.exec('target', 'UPDATE public.items SET amount = amount - 0.01 WHERE id = 4321');
    expect((await sides('items', 'target', 2)).sum).toBe(source.sum);
  });

  it('reads a partitioned table whole in its first share, and nothing in the others', async () => {
    const got = await sides('parts', 'source', 3);
    expect({ rows: got.rows, sum: got.sum }).toEqual(await whole('source', 'parts'));
    expect(got.shares.map((s) => s.rows)).toEqual([9000, 0, 0]);
    expect(got.shares[0].blocks).toBeNull();
  });
});
