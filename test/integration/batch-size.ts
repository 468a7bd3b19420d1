/**
 * Copy batches without a batchRows hold about 64 MB of rows: a table of wide rows is copied in
 * several small transactions, a narrow one in few large ones, and a given batchRows is kept as
 * is. What a batch held is read off the target: the rows one transaction wrote share its xmin.
 */
import { copyTableOf, MigrationPlan } from '../../src/core/plan';
import { parseSpec } from '../../src/core/spec';
import { BATCH_BYTES } from '../../src/core/spec-limits';
import { TestDatabases } from '../helpers/databases';
import { DirectActivities, directActivities } from '../helpers/direct-activities';

const FULL_WIDE_ROWS = 640; // 128 KB of incompressible text each: about 84 MB
const NARROW_ROWS = 300_000; // about 50 bytes each: 15 MB
// Rows of 8 KB as COPY sends them (stored compressed, so the tables stay small): about 8,000 a
// batch. The key steps by 100 over the first half and by 1 over the second.
const STEP_ROWS = 24_000;
const gappySql = (table: string, options = '') =>
  `CREATE TABLE public.${table} (id bigint PRIMARY KEY, body text) ${options};
   INSERT INTO public.${table} SELECT g * 100, repeat('x', 8000) || g FROM generate_series(1, ${STEP_ROWS}) g;
   INSERT INTO public.${table} SELECT ${STEP_ROWS * 100} + g, repeat('y', 8000) || g FROM generate_series(1, ${STEP_ROWS}) g;`;

/**
 * The suite: `wide` runs the 84 MB case of wide rows (the soak tier: test/soak/batch-size.test.ts),
 * `others` the rest (`npm test`: test/integration/batch-size.test.ts). A run without the wide
 * case seeds its table empty.
 */
export function batchSizeSuite({ wide, others }: { wide: boolean; others: boolean }): void {
  const WIDE_ROWS = wide ? FULL_WIDE_ROWS : 0;
  /** `it` for the cases this tier runs; the others are not registered at all. */
  const maybe = (run: boolean): typeof it => (run ? it : ((() => undefined) as unknown as typeof it));
  describe('copy batches sized by bytes', () => {
    let dbs: TestDatabases;
    let direct: DirectActivities;
    let plan: MigrationPlan;
    const run = <T>(fn: () => Promise<T>): Promise<T> => direct.run(fn);

    beforeAll(async () => {
      dbs = await TestDatabases.create('batchsize', ['source', 'target']);
      await dbs.exec(
        'source',
        `CREATE TABLE public.docs (id int PRIMARY KEY, body text);
         INSERT INTO public.docs SELECT g, (SELECT string_agg(md5(g::text || ':' || i || random()::text), '') FROM generate_series(1, 4096) i)
           FROM generate_series(1, ${WIDE_ROWS}) g;
         CREATE TABLE public.narrow (id int PRIMARY KEY, memo text);
         INSERT INTO public.narrow SELECT g, md5(g::text) FROM generate_series(1, ${NARROW_ROWS}) g;
         CREATE TABLE public.fixed (LIKE public.narrow INCLUDING ALL);
         INSERT INTO public.fixed SELECT * FROM public.narrow;
         ${gappySql('gappy')}
         ANALYZE;
         ${gappySql('unanalyzed', 'WITH (autovacuum_enabled = false)')}`,
      );
      direct = directActivities(dbs);
      const { activities } = direct;
      const tables = ['public.docs', 'public.narrow', 'public.fixed', 'public.gappy', 'public.unanalyzed'].map((name) => ({ name, chunks: 1 }));
      // Without validation: batches of key ranges, whose sizes are exact (a large table read by
      // blocks takes about a batch's rows of blocks a batch: test/integration/keyless.test.ts).
      plan = await run(() => activities.preflight({ migrationId: 'sized', spec: parseSpec({ source: 'src', target: 'dst', validation: 'none', tables }) }));
      await run(() => activities.prepareTarget({ migrationId: 'sized', source: 'src', target: 'dst', plan, truncate: false, primaryKeyAfterLoad: false }));
    });

    afterAll(async () => {
      await direct?.close();
      await dbs?.drop();
    });

    const copy = (index: number, batchRows?: number) =>
      run(() =>
        direct.activities.copyChunk({
          migrationId: 'sized',
          source: 'src',
          target: 'dst',
          table: copyTableOf(plan.tables[index]),
          chunk: plan.tables[index].chunks[0],
          ...(batchRows === undefined ? {} : { batchRows }),
          fence: 1,
          sliceMs: 600_000,
        }),
      );

    /** The target's transactions that wrote the table, in key order: rows and text bytes each. */
    const transactions = (table: string) =>
      dbs.query<{ rows: number; bytes: number }>(
        'target',
        `SELECT count(*)::int AS rows, sum(octet_length(t::text))::int8::float8 AS bytes FROM public.${table} t GROUP BY xmin::text ORDER BY min(id)`,
      );

    const digest = async (role: string, table: string) =>
      (await dbs.query<{ d: string; n: number }>(role, `SELECT md5(string_agg(t::text, '|' ORDER BY id)) AS d, count(*)::int AS n FROM public.${table} t`))[0];

    maybe(wide)('copies wide rows in transactions of at most about 64 MB', async () => {
      const result = await copy(0);
      expect(result.checkpoint.done).toBe(true);
      expect(await digest('target', 'docs')).toEqual(await digest('source', 'docs'));
      const txs = await transactions('docs');
      // 84 MB in batches of at most about 64 MB (a 50,000-row batch would have taken it all at once).
      expect(txs.length).toBeGreaterThanOrEqual(2);
      for (const tx of txs) expect(tx.bytes).toBeLessThanOrEqual(BATCH_BYTES * 1.1);
      expect(txs.reduce((n, tx) => n + tx.rows, 0)).toBe(WIDE_ROWS);
    });

    maybe(others)('copies narrow rows in one transaction where 50,000-row batches took six', async () => {
      const result = await copy(1);
      expect(result.checkpoint.done).toBe(true);
      expect(await digest('target', 'narrow')).toEqual(await digest('source', 'narrow'));
      expect(await transactions('narrow')).toEqual([{ rows: NARROW_ROWS, bytes: expect.any(Number) }]);
    });

    // Past the first batches, an integer key's batch ends come from arithmetic on the key (the rows
    // per key unit of the batch before) instead of a walk through the key index (src/core/key-stride.ts).
    maybe(others)('steps to batch ends on an integer key, and walks where the planner expects the step to take too many rows', async () => {
      const result = await copy(3);
      expect(result.checkpoint.done).toBe(true);
      expect(await digest('target', 'gappy')).toEqual(await digest('source', 'gappy'));
      const txs = await transactions('gappy');
      expect(txs.reduce((n, tx) => n + tx.rows, 0)).toBe(2 * STEP_ROWS);
      // A step sized by the sparse half would have taken the whole dense half (24,000 rows) at
      // once; the planner's estimate sends that batch to the index walk instead.
      const wanted = BATCH_BYTES / 8000;
      for (const tx of txs) expect(tx.rows).toBeLessThanOrEqual(wanted * 2);
      expect(txs.length).toBeGreaterThanOrEqual(5);
      expect(result.stepped).toBeGreaterThanOrEqual(2);
    });

    maybe(others)('walks to every batch end where the key column has no statistics to check a step against', async () => {
      const result = await copy(4);
      expect(await digest('target', 'unanalyzed')).toEqual(await digest('source', 'unanalyzed'));
      expect((await transactions('unanalyzed')).length).toBeGreaterThanOrEqual(5);
      expect(result.stepped).toBeUndefined();
    });

    maybe(others)('keeps a given batchRows', async () => {
      await copy(2, 100_000);
      expect(await digest('target', 'fixed')).toEqual(await digest('source', 'fixed'));
      expect((await transactions('fixed')).map((tx) => tx.rows)).toEqual([100_000, 100_000, 100_000]);
    });
  });
}
