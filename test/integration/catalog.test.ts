/**
 * readTables reads many tables in five statements and sorts the rows back to their tables: each
 * table must come back as it comes back alone, in the order asked, with null for one that does
 * not exist. Checked on real PostgreSQL, with tables whose catalogs differ in every part read.
 */
import { Client } from 'pg';
import { readTable, readTables } from '../../src/db/catalog';
import { TestDatabases } from '../helpers/databases';

describe('readTables', () => {
  let dbs: TestDatabases;
  let db: Client;

  beforeAll(async () => {
    dbs = await TestDatabases.create('catalog', ['db']);
    db = new Client({ connectionString: dbs.url('db') });
    await db.connect();
    await db.query(`
      CREATE SCHEMA other;
      CREATE TYPE other.mood AS ENUM ('calm', 'loud');
      CREATE TABLE public.parent (id bigserial PRIMARY KEY, code text UNIQUE, CHECK (length(code) < 10));
      CREATE INDEX parent_code_lower ON public.parent (lower(code));
      CREATE TABLE other.child (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, parent_id bigint REFERENCES public.parent, mood other.mood, note text COLLATE "C");
      CREATE TABLE public.days (day date, n int, PRIMARY KEY (day)) PARTITION BY RANGE (day);
      CREATE TABLE public.days_2026 PARTITION OF public.days FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
      INSERT INTO public.parent (code) VALUES ('a'), ('b');
      INSERT INTO public.days VALUES ('2026-03-01', 1), ('2026-04-01', 2);
      UPDATE public.days SET n = 3 WHERE day = '2026-03-01';
    `);
    // Table statistics reach the shared view at the latest when the session that wrote ends.
    await db.query('SELECT pg_stat_force_next_flush()');
  });

  afterAll(async () => {
    await db?.end();
    await dbs?.drop();
  });

  it('gives each table as readTable gives it alone, in the order asked, null where missing', async () => {
    const names = [
      { schema: 'other', name: 'child' },
      { schema: 'public', name: 'missing' },
      { schema: 'public', name: 'days' },
      { schema: 'public', name: 'parent' },
      { schema: 'other', name: 'child' },
    ];
    const together = await readTables(db, names);
    const alone = [];
    for (const name of names) alone.push(await readTable(db, name));
    expect(together).toEqual(alone);
    expect(together.map((t) => t?.name.name ?? null)).toEqual(['child', null, 'days', 'parent', 'child']);

    const [child, , days, parent] = together;
    expect(child!.columns.map((c) => c.name)).toEqual(['id', 'parent_id', 'mood', 'note']);
    expect(child!.foreignKeys).toHaveLength(1);
    expect(child!.foreignKeys[0].referenced).toEqual({ schema: 'public', name: 'parent' });
    expect(child!.sequences).toHaveLength(1);
    expect(child!.sequences[0].identity).toBe(true);
    expect(parent!.sequences.map((s) => s.column)).toEqual(['id']);
    expect(parent!.uniques.map((u) => u.name)).toEqual(['parent_code_key']);
    expect(parent!.checks).toHaveLength(1);
    expect(parent!.indexes.map((i) => i.name)).toEqual(['parent_code_lower']);
    expect(parent!.foreignKeys).toEqual([]);
    expect(parent!.writes).toBe(2);
    // A partitioned table's writes are its partitions'.
    expect(days!.partitionKey).toBe('RANGE (day)');
    expect(days!.writes).toBe(3);
  });

  it('reads nothing for no tables', async () => {
    expect(await readTables(db, [])).toEqual([]);
  });
});
