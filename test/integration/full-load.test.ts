/**
 * Full-load migration through the whole stack — dev server, worker with bundled workflows,
 * activities on real PostgreSQL — checked with SQL on both databases, not with Ferry's report.
 */
import { objectInventory, rowsAsText } from '../helpers/databases';
import { stackSuite } from '../helpers/suite';
import { activityStarts } from '../helpers/history';
import { workflowIds } from '../../src/core/names';
import { ALL_TYPES_SPEC_TABLES, ALL_TYPES_SQL as SOURCE_SCHEMA, ALL_TYPES_TABLES as TABLES } from '../fixtures/all-types';

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
      tables: ALL_TYPES_SPEC_TABLES,
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
