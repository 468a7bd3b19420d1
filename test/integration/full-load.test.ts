/**
 * Full-load migration through the whole stack — dev server, worker with bundled workflows,
 * activities on real PostgreSQL — checked with SQL on both databases, not with Ferry's report.
 */
import { objectInventory, rowsAsText } from '../helpers/databases';
import { stackSuite } from '../helpers/suite';
import { activityStarts } from '../helpers/history';
import { workflowIds } from '../../src/core/names';

const SOURCE_SCHEMA = `
CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy', 'it''s complicated');
CREATE DOMAIN public.percent AS numeric(5,2) CHECK (VALUE BETWEEN 0 AND 100);
CREATE TABLE public.all_types (
  id bigint PRIMARY KEY,
  s smallint, i integer, b bigint, n numeric(14,4), r real, d double precision, bo boolean,
  t text, v varchar(50), by bytea, u uuid, dt date, ts timestamp, tz timestamptz, iv interval,
  j json, jb jsonb, ia integer[], ta text[], m public.mood, p public.percent
);
INSERT INTO public.all_types VALUES
 (1, 1, 2, 3, 1.2345, 'NaN', 'Infinity', true, 'plain', 'v', '\\x00ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '2024-02-29', '2024-01-01 12:34:56.789', '2024-01-01 12:34:56.789+05', '1 year 2 mons 3 days 04:05:06.789',
  '{"a": 1, "a": 2}', '{"b": [1, 2, {"c": null}]}', '{1,NULL,3}', '{"a b","c,d","e\\"f",NULL}', 'it''s complicated', 99.5),
 (2, -32768, -2147483648, -9223372036854775808, -9999999999.9999, '-Infinity', '-0', false,
  E'tab\\there\\nnew line\\\\backslash \\r cr', '', '\\x', '00000000-0000-0000-0000-000000000000',
  '0001-01-01 BC', '294276-12-31 23:59:59.999999', 'infinity', '-178000000 years', '[]', '{}', '{}', '{}', 'sad', 0),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, 32767, 2147483647, 9223372036854775807, 0.0001, 3.4028235e38, 1.7976931348623157e308, true,
  'héllo wörld ✓ 中文 🚀 ''quoted'' "double"', 'ünïcödé', '\\xdeadbeef', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
  'infinity', '-infinity', '2000-01-01 00:00:00+00', '-1 days +02:03:04', '"just a string"', 'null', '{-1}', '{"",NULL,"\\\\"}', 'ok', 100),
 (5, 0, 0, 0, 'NaN', '-0', 1e-300, false, E'\\\\N looks like null', '\\N', '\\x5c4e', '12345678-1234-1234-1234-123456789abc',
  '1970-01-01', '1970-01-01 00:00:00', '1969-12-31 23:59:59.999999-12', '00:00:00', '{"nested": {"deep": [true, false]}}', '[1, "two", 3.0]', NULL, '{NULL}', NULL, NULL);
INSERT INTO public.all_types (id, i, n, d, t, tz, jb, ia)
  SELECT 1000 + g, g, g / 7.0, g * 1.1, md5(g::text) || E'\\t' || g, '2020-01-01'::timestamptz + g * interval '1 minute', jsonb_build_object('g', g), ARRAY[g, g + 1]
    FROM generate_series(1, 4000) g;

-- Arrays of user types carry type oids in binary COPY, so this table must travel as text.
CREATE TABLE public.enum_arrays (id int PRIMARY KEY, ma public.mood[], p public.percent);
INSERT INTO public.enum_arrays VALUES (1, '{sad,happy}', 1), (2, '{}', NULL), (3, NULL, 50), (4, '{"it''s complicated",NULL}', 100);

CREATE TABLE public.keys_uuid (id uuid PRIMARY KEY, v int NOT NULL);
INSERT INTO public.keys_uuid SELECT md5('u' || g)::uuid, g FROM generate_series(1, 3000) g;

CREATE TABLE public.keys_text (id text PRIMARY KEY, v int);
INSERT INTO public.keys_text SELECT w || g, g FROM generate_series(1, 1500) g, unnest(ARRAY['ä', 'Ω', 'z', 'A', 'a b', '中', '🚀']) w;

CREATE TABLE public.keys_composite (a int, b text, v text, PRIMARY KEY (a, b));
INSERT INTO public.keys_composite SELECT g % 50, 'k' || g, md5(g::text) FROM generate_series(1, 5000) g;

CREATE TABLE public.gaps (id bigint PRIMARY KEY, v text);
INSERT INTO public.gaps SELECT g, 'low' FROM generate_series(1, 1000) g;
INSERT INTO public.gaps SELECT 1000000000000 + g, 'mid' FROM generate_series(1, 1000) g;
INSERT INTO public.gaps VALUES (9223372036854775806, 'top'), (-9223372036854775808, 'bottom');

CREATE TABLE public.empty_table (id int PRIMARY KEY, v text);
CREATE TABLE public.one_row (id int PRIMARY KEY, v text);
INSERT INTO public.one_row VALUES (42, 'only');

CREATE SCHEMA app;
CREATE TABLE app."Order Lines" ("Line Id" bigserial PRIMARY KEY, qty int CHECK (qty > 0), total numeric GENERATED ALWAYS AS (qty * 2) STORED);
INSERT INTO app."Order Lines" (qty) SELECT g FROM generate_series(1, 700) g;
CREATE TABLE app.with_identity (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ref bigint REFERENCES app."Order Lines" ("Line Id"), label text UNIQUE);
INSERT INTO app.with_identity (ref, label) SELECT g, 'label ' || g FROM generate_series(1, 600) g;
CREATE INDEX with_identity_lower ON app.with_identity (lower(label)) WHERE ref > 10;
SELECT setval('app."Order Lines_Line Id_seq"', 5000);
ANALYZE;
`;

const TABLES: [string, string][] = [
  ['public.all_types', 'id'],
  ['public.enum_arrays', 'id'],
  ['public.keys_uuid', 'id'],
  ['public.keys_text', 'id'],
  ['public.keys_composite', 'a, b'],
  ['public.gaps', 'id'],
  ['public.empty_table', 'id'],
  ['public.one_row', 'id'],
  ['app."Order Lines"', '"Line Id"'],
  ['app.with_identity', 'id'],
];

describe('a full-load migration', () => {
  let sourceBefore: string[];

  const suite = stackSuite({
    name: 'full',
    databases: { source: SOURCE_SCHEMA, target: '' },
    connections: { legacy: 'source', v2: 'target' },
    seed: async (dbs) => {
      sourceBefore = await objectInventory(dbs, 'source');
    },
  });

  it('copies every type, key kind and table shape exactly, then leaves no trace of Ferry', async () => {
    const spec = {
      source: 'legacy',
      target: 'v2',
      batchRows: 500,
      parallelism: { tables: 3, chunks: 3 },
      tables: [
        { name: 'public.all_types', chunks: 4 },
        'public.enum_arrays',
        { name: 'public.keys_uuid', chunks: 3 },
        { name: 'public.keys_text', chunks: 3 },
        { name: 'public.keys_composite', chunks: 3 },
        { name: 'public.gaps', chunks: 4 },
        'public.empty_table',
        { name: 'public.one_row', chunks: 2 },
        'app."Order Lines"',
        'app.with_identity',
      ],
    };
    const plan = await suite.stack.ferry.preflight(spec, 'full-load-plan');
    const format = (name: string) => plan.tables.find((t) => `${t.source.schema}.${t.source.name}` === name)?.copyFormat;
    expect([format('public.all_types'), format('public.enum_arrays'), format('public.gaps')]).toEqual(['binary', 'text', 'binary']);
    expect(plan.tables.find((t) => t.source.name === 'gaps')?.chunks).toHaveLength(4);

    const started = await suite.stack.ferry.start(spec, { id: 'full-load-e2e' });
    const result = await suite.stack.ferry.result(started.id);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    // Where the time went: the steps in order, back to back, adding up to the whole run.
    const timeline = result.timeline ?? [];
    expect(timeline.map((t) => t.step)).toEqual(['preflight', 'prepare', 'tables', 'foreign keys', 'finish']);
    for (let i = 1; i < timeline.length; i += 1) expect(timeline[i].startedAt).toBe(timeline[i - 1].endedAt);
    const stepsMs = timeline.reduce((n, t) => n + (t.ms ?? 0), 0);
    expect(stepsMs).toBeLessThanOrEqual(result.duration_ms);
    expect(stepsMs).toBeGreaterThan(result.duration_ms * 0.5);

    for (const [table, key] of TABLES) {
      const [source, target] = await Promise.all([rowsAsText(suite.dbs, 'source', table, key), rowsAsText(suite.dbs, 'target', table, key)]);
      expect({ table, rows: target.length }).toEqual({ table, rows: source.length });
      expect(target).toEqual(source);
    }

    // Generated columns are recomputed by the target; sequences continue where the source's are.
    const [seq] = await suite.dbs.query('target', `SELECT last_value::text AS v FROM app."Order Lines_Line Id_seq"`);
    expect(seq.v).toBe('5000');
    const [identity] = await suite.dbs.query('target', `INSERT INTO app.with_identity (label) VALUES ('new') RETURNING id`);
    expect(identity.id).toBe(601);
    const [generated] = await suite.dbs.query('target', `SELECT attgenerated FROM pg_attribute WHERE attrelid = 'app."Order Lines"'::regclass AND attname = 'total'`);
    expect(generated.attgenerated).toBe('s');

    // Secondary indexes, unique constraints and foreign keys (validated) arrive after the load.
    const indexes = await suite.dbs.query<{ def: string }>('target', `SELECT pg_get_indexdef(indexrelid) AS def FROM pg_index WHERE indrelid = 'app.with_identity'::regclass ORDER BY 1`);
    expect(indexes.map((i) => i.def)).toEqual([
      'CREATE INDEX with_identity_lower ON app.with_identity USING btree (lower(label)) WHERE (ref > 10)',
      'CREATE UNIQUE INDEX with_identity_label_key ON app.with_identity USING btree (label)',
      'CREATE UNIQUE INDEX with_identity_pkey ON app.with_identity USING btree (id)',
    ]);
    const fks = await suite.dbs.query('target', `SELECT conname, convalidated FROM pg_constraint WHERE contype = 'f' AND conrelid = 'app.with_identity'::regclass`);
    expect(fks).toEqual([{ conname: 'with_identity_ref_fkey', convalidated: true }]);
    // A small table (one chunk, 600 rows) got its key, indexes and ANALYZE from its copy
    // activity: its workflow ran no activity of theirs.
    const small = plan.tables.find((t) => t.source.name === 'with_identity')!;
    const ran = new Set((await activityStarts(suite.stack.client, workflowIds.table(started.id, small.index))).map((a) => a.activityType));
    expect([...ran].sort()).toEqual(['copyChunk', 'validateChunk']);
    const [analyzed] = await suite.dbs.query('target', `SELECT last_analyze IS NOT NULL AS done FROM pg_stat_user_tables WHERE relid = 'app.with_identity'::regclass`);
    expect(analyzed.done).toBe(true);

    // Nothing of Ferry remains: no bookkeeping on the target, the source untouched.
    expect(await suite.dbs.query('target', `SELECT nspname FROM pg_namespace WHERE nspname = '_ferry'`)).toEqual([]);
    expect(await objectInventory(suite.dbs, 'source')).toEqual(sourceBefore);

    // The status document tells the same story as the databases.
    const status = await suite.stack.ferry.status(started.id);
    expect(status.state).toBe('SUCCEEDED');
    expect(status.phase).toBe('COMPLETED');
    expect(status.tables.find((t) => t.source === 'public.all_types')?.rowsCopied).toBe(4005);
    expect(status.tables.find((t) => t.source === 'app."Order Lines"')?.chunks.every((c) => c.state === 'DONE')).toBe(true);
    const types = status.events.map((e) => e.type);
    expect(types[0]).toBe('MigrationStarted');
    expect(types).toContain('SliceMigrated');
    expect(types.filter((t) => t === 'TableCopied')).toHaveLength(TABLES.length);
    expect(types.filter((t) => t === 'ValidationPassed')).toHaveLength(TABLES.length);
    expect(types[types.length - 1]).toBe('MigrationFinished');
    const stateMoves = status.transitions.filter((t) => t.machine === 'state').map((t) => `${t.from}→${t.to}`);
    expect(stateMoves).toEqual(['PENDING→QUEUED', 'QUEUED→RUNNING', 'RUNNING→SUCCEEDED']);
    const phaseMoves = status.transitions.filter((t) => t.machine === 'phase').map((t) => t.to);
    expect(phaseMoves).toEqual(['FULL_MIGRATING', 'FULL_DONE', 'VALIDATING', 'COMPLETED']);
  });

  it('builds the key and indexes with activities of their own for a table its statistics called small but whose copy found it large', async () => {
    // Analysed at 10 rows, then grown past the small-table bound with no new statistics.
    await suite.dbs.exec(
      'source',
      `CREATE TABLE public.grown (id int PRIMARY KEY, v text NOT NULL) WITH (autovacuum_enabled = false);
       CREATE INDEX grown_v ON public.grown (v);
       INSERT INTO public.grown SELECT g, 'v' || g FROM generate_series(1, 10) g;
       ANALYZE public.grown;
       INSERT INTO public.grown SELECT g, 'v' || g FROM generate_series(11, 120000) g;`,
    );
    const spec = { source: 'legacy', target: 'v2', validation: 'count', tables: ['public.grown'] };
    const plan = await suite.stack.ferry.preflight(spec, 'grown-plan');
    expect({ chunks: plan.tables[0].chunks.length, rowsEstimated: plan.tables[0].rowsEstimated }).toEqual({ chunks: 1, rowsEstimated: 10 });
    const { id } = await suite.stack.ferry.start(spec, { id: 'full-grown' });
    const result = await suite.stack.ferry.result(id);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    const ran = new Set((await activityStarts(suite.stack.client, workflowIds.table(id, 0))).map((a) => a.activityType));
    expect([...ran].sort()).toEqual(['addPrimaryKey', 'analyzeTable', 'buildIndex', 'copyChunk', 'listIndexes', 'validateChunk']);
    const indexes = await suite.dbs.query<{ def: string }>('target', `SELECT pg_get_indexdef(indexrelid) AS def FROM pg_index WHERE indrelid = 'public.grown'::regclass ORDER BY 1`);
    expect(indexes.map((i) => i.def)).toEqual(['CREATE INDEX grown_v ON public.grown USING btree (v)', 'CREATE UNIQUE INDEX grown_pkey ON public.grown USING btree (id)']);
    expect(await rowsAsText(suite.dbs, 'target', 'public.grown', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.grown', 'id'));
  });
});
