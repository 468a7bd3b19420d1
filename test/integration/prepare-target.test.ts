/**
 * prepareTarget, finishTarget and rollback called directly against real PostgreSQL, on a target
 * that already holds objects of its own: Ferry takes over nothing it did not create.
 */
import { MockActivityEnvironment as SdkMockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { copyTableOf } from '../../src/core/plan';
import { parseSpec } from '../../src/core/spec';
import { objectInventory, rowsAsText, TestDatabases } from '../helpers/databases';
import { copySequencePositions } from '../../src/db/sequences';

class MockActivityEnvironment extends SdkMockActivityEnvironment {
  constructor() {
    super(undefined, { logger: new DefaultLogger('ERROR') });
  }
}

/** What another table's sequence looks like from the outside: its position, owner and the default that uses it. */
const OTHER_SEQUENCE_SQL = `
SELECT s.last_value::text AS last_value, s.is_called,
       pg_get_serial_sequence('public.other', 'id') AS owned_by_other,
       (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
         WHERE d.adrelid = 'public.other'::regclass AND d.adnum = 1) AS other_default
  FROM public.items_id_seq s`;

describe('prepareTarget on a target with objects of its own', () => {
  let dbs: TestDatabases;
  let connections: ConnectionRegistry;
  let activities: ReturnType<typeof createActivities>;
  const run = <T>(fn: () => Promise<T>): Promise<T> => new MockActivityEnvironment().run(fn) as Promise<T>;

  beforeEach(async () => {
    dbs = await TestDatabases.create('prep', ['source', 'target']);
    const env = { FERRY_CONN_SRC: dbs.url('source'), FERRY_CONN_DST: dbs.url('target') };
    connections = new ConnectionRegistry({ env });
    activities = createActivities({ connections, logger: silentLogger(), env });
  });

  afterEach(async () => {
    await connections?.close();
    await dbs?.drop();
  });

  it('leaves another table\'s sequence of the same name alone, through success and through rollback', async () => {
    // Two source tables whose sequences both map to public.items_id_seq on the target.
    await dbs.exec('source', `CREATE TABLE public.items (id serial PRIMARY KEY, v text);
      INSERT INTO public.items (v) SELECT 'v' || g FROM generate_series(1, 100) g;
      CREATE SCHEMA archive; CREATE TABLE archive.items (id serial CONSTRAINT archived_pkey PRIMARY KEY, v text);
      INSERT INTO archive.items (v) SELECT 'a' || g FROM generate_series(1, 30) g;`);
    // The target's own table, whose serial sequence happens to carry the name the source's has.
    await dbs.exec('target', `CREATE TABLE public.other (id serial PRIMARY KEY, note text);
      ALTER SEQUENCE public.other_id_seq RENAME TO items_id_seq;
      INSERT INTO public.other (note) SELECT 'o' || g FROM generate_series(1, 500) g;`);
    const inventory = await objectInventory(dbs, 'target');
    const [other] = await dbs.query('target', OTHER_SEQUENCE_SQL);
    expect(other).toEqual({ last_value: '500', is_called: true, owned_by_other: 'public.items_id_seq', other_default: "nextval('items_id_seq'::regclass)" });

    const spec = parseSpec({ id: 'seq', source: 'src', target: 'dst', tables: ['public.items', { name: 'archive.items', target: 'public.archived' }] });
    const plan = await run(() => activities.preflight({ migrationId: 'seq', spec }));
    await run(() => activities.prepareTarget({ migrationId: 'seq', source: 'src', target: 'dst', plan, truncate: false }));
    for (const table of plan.tables) {
      for (const chunk of table.chunks) {
        await run(() =>
          activities.copyChunk({ migrationId: 'seq', source: 'src', target: 'dst', table: copyTableOf(table), chunk, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }),
        );
      }
    }
    await run(() => activities.finishTarget({ source: 'src', target: 'dst', tables: plan.tables }));

    expect(await dbs.query('target', OTHER_SEQUENCE_SQL)).toEqual([other]);
    // Each new table draws from a sequence of its own, set to its source's position.
    const mine = await dbs.query<{ items: string; archived: string }>(
      'target',
      `SELECT pg_get_serial_sequence('public.items', 'id') AS items, pg_get_serial_sequence('public.archived', 'id') AS archived`,
    );
    expect(mine).toEqual([{ items: 'public.items_id_seq_ferry_1', archived: 'public.items_id_seq_ferry_2' }]);
    expect(await rowsAsText(dbs, 'target', 'public.items', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.items', 'id'));
    expect(await rowsAsText(dbs, 'target', 'public.archived', 'id')).toEqual(await rowsAsText(dbs, 'source', 'archive.items', 'id'));
    expect(await dbs.query('target', `INSERT INTO public.items (v) VALUES ('next') RETURNING id`)).toEqual([{ id: 101 }]);
    expect(await dbs.query('target', `INSERT INTO public.archived (v) VALUES ('next') RETURNING id`)).toEqual([{ id: 31 }]);
    expect(await dbs.query('target', `INSERT INTO public.other (note) VALUES ('next') RETURNING id`)).toEqual([{ id: 501 }]);

    await run(() => activities.dropTargetObjects({ migrationId: 'seq', target: 'dst' }));
    expect(await objectInventory(dbs, 'target')).toEqual(inventory);
    expect(await dbs.query('target', OTHER_SEQUENCE_SQL)).toEqual([{ ...other, last_value: '501' }]);
    expect(await dbs.query('target', `INSERT INTO public.other (note) VALUES ('after rollback') RETURNING id`)).toEqual([{ id: 502 }]);
  });

  it('carries every sequence position in a few statements: used and unused serials, identity, sequences no column owns past one statement, a column without one left alone', async () => {
    const loose = Array.from({ length: 620 }, (_, i) => ({ schema: 'loose', name: `s${i}` }));
    const looseDdl = loose.map((q, i) => `CREATE SEQUENCE loose.${q.name};${i % 7 === 0 ? '' : ` SELECT setval('loose.${q.name}', ${i + 1});`}`).join('\n');
    await dbs.exec('source', `CREATE TABLE public.used (id serial PRIMARY KEY, v text);
      INSERT INTO public.used (v) SELECT 'v' || g FROM generate_series(1, 40) g;
      CREATE TABLE public.ident (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v text);
      INSERT INTO public.ident (v) SELECT 'v' || g FROM generate_series(1, 25) g;
      CREATE TABLE public.unused (id serial PRIMARY KEY, v text);
      CREATE SCHEMA loose; ${looseDdl}`);
    await dbs.exec('target', `CREATE SCHEMA loose; ${loose.map((q) => `CREATE SEQUENCE loose.${q.name};`).join('\n')}
      CREATE TABLE public.plain (id int PRIMARY KEY)`);
    const spec = parseSpec({ id: 'seqs', source: 'src', target: 'dst', tables: ['public.used', 'public.ident', 'public.unused'] });
    const plan = await run(() => activities.preflight({ migrationId: 'seqs', spec }));
    await run(() => activities.prepareTarget({ migrationId: 'seqs', source: 'src', target: 'dst', plan, truncate: false }));
    for (const table of plan.tables) {
      for (const chunk of table.chunks) {
        await run(() => activities.copyChunk({ migrationId: 'seqs', source: 'src', target: 'dst', table: copyTableOf(table), chunk, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }));
      }
    }
    await run(() => activities.finishTarget({ source: 'src', target: 'dst', tables: plan.tables, sequences: loose }));

    const positions = (role: string, names: string[]) =>
      dbs.query<{ n: string; last_value: string; is_called: boolean }>(role, `SELECT n, last_value, is_called FROM (${names.map((n, i) => `SELECT ${i} AS i, '${n}' AS n, last_value::text AS last_value, is_called FROM ${n}`).join(' UNION ALL ')}) x ORDER BY i`);
    const owned = async (role: string) =>
      (await dbs.query<{ seq: string }>(role, `SELECT pg_get_serial_sequence('public.' || t, 'id') AS seq FROM unnest(ARRAY['used', 'ident', 'unused']) t`)).map((r) => r.seq);
    const looseNames = loose.map((q) => `loose.${q.name}`);
    expect((await positions('target', looseNames)).map(({ last_value, is_called }) => [last_value, is_called])).toEqual(
      (await positions('source', looseNames)).map(({ last_value, is_called }) => [last_value, is_called]),
    );
    expect((await positions('target', await owned('target'))).map(({ last_value, is_called }) => [last_value, is_called])).toEqual([
      ['40', true],
      ['25', true],
      ['1', false],
    ]);
    expect(await dbs.query('target', `INSERT INTO public.unused (v) VALUES ('first') RETURNING id`)).toEqual([{ id: 1 }]);
    expect(await dbs.query('target', `INSERT INTO public.ident (v) VALUES ('next') RETURNING id`)).toEqual([{ id: 26 }]);

    // A target table whose column draws from no sequence: nothing is set, nothing fails.
    await connections.withClient('src', (source) =>
      connections.withClient('dst', (target) =>
        copySequencePositions(source, target, [
          { source: { schema: 'public', name: 'used_id_seq' }, table: { schema: 'public', name: 'plain' }, column: 'id' },
          { source: { schema: 'loose', name: 's3' }, target: { schema: 'loose', name: 's1' } },
        ]),
      ),
    );
    expect(await positions('target', ['loose.s1'])).toEqual([{ n: 'loose.s1', last_value: '4', is_called: true }]);
  });
});
