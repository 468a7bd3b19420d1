/**
 * Activities called directly (MockActivityEnvironment) against real PostgreSQL: pinned
 * sessions, the chunk fence against zombie attempts, resuming from committed checkpoints, and
 * preflight's refusal of tables that row-level security would silently shrink.
 */
import { randomBytes } from 'node:crypto';
import { MockActivityEnvironment as SdkMockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { ApplicationFailure } from '@temporalio/common';
import { createActivities } from '../../activities';
import { ensureBookkeeping } from '../../src/db/bookkeeping';
import { CopyChunkInput, CopyChunkResult } from '../../activities/copy-chunk';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { parseSpec } from '../../src/core/spec';
import { adminUrl, TestDatabases, withClient, withCredentials } from '../helpers/databases';

/** The SDK's mock environment, without its log line for every (expected) activity failure. */
class MockActivityEnvironment extends SdkMockActivityEnvironment {
  constructor(info?: ConstructorParameters<typeof SdkMockActivityEnvironment>[0]) {
    super(info, { logger: new DefaultLogger('ERROR') });
  }
}

describe('activities on real PostgreSQL', () => {
  let dbs: TestDatabases;
  let connections: ConnectionRegistry;
  let activities: ReturnType<typeof createActivities>;
  const role = `ferry_limited_${randomBytes(3).toString('hex')}`;

  const table: CopyChunkInput['table'] = {
    index: 0,
    source: { schema: 'public', name: 'items' },
    target: { schema: 'public', name: 'items' },
    columns: ['id', 'v'],
    keyColumns: [{ name: 'id', type: 'integer', collatable: false }],
    copyFormat: 'binary',
    keyCollateC: false,
  };
  const input = (over: Partial<CopyChunkInput> = {}): CopyChunkInput => ({
    migrationId: 'm1',
    source: 'src',
    target: 'dst',
    table,
    chunk: { index: 0, lower: null, upper: null },
    batchRows: 100,
    fence: 10,
    sliceMs: 60_000,
    ...over,
  });

  beforeAll(async () => {
    dbs = await TestDatabases.create('acts', ['source', 'target', 'rollback']);
    await dbs.exec('source', `CREATE TABLE public.items (id int PRIMARY KEY, v text);
      INSERT INTO public.items SELECT g, 'v' || g FROM generate_series(1, 1000) g;
      CREATE TABLE public.secret (id int PRIMARY KEY, owner text);
      INSERT INTO public.secret VALUES (1, 'alice'), (2, 'bob');
      ALTER TABLE public.secret ENABLE ROW LEVEL SECURITY;
      CREATE POLICY only_alice ON public.secret USING (owner = 'alice');`);
    await withClient(adminUrl(), (c) => c.query(`CREATE ROLE ${role} LOGIN`));
    await dbs.exec('source', `GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${role}`);
    await dbs.exec(
      'target',
      `CREATE TABLE public.items (id int PRIMARY KEY, v text);
       CREATE SCHEMA _ferry;
       CREATE TABLE _ferry.checkpoints (migration_id text, table_index int, chunk_index int, last_key text[], rows_copied bigint NOT NULL DEFAULT 0,
         done boolean NOT NULL DEFAULT false, owner_token bigint NOT NULL DEFAULT 0, owner text, updated_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (migration_id, table_index, chunk_index));
       INSERT INTO _ferry.checkpoints (migration_id, table_index, chunk_index) VALUES ('m1', 0, 0);`,
    );
    const env = { FERRY_CONN_SRC: dbs.url('source'), FERRY_CONN_DST: dbs.url('target'), FERRY_CONN_LIMITED: withCredentials(dbs.url('source'), role), FERRY_CONN_RB: dbs.url('rollback') };
    connections = new ConnectionRegistry({ env });
    activities = createActivities({ connections, logger: silentLogger(), env });
  });

  afterAll(async () => {
    await connections?.close();
    await dbs?.drop();
    await withClient(adminUrl(), (c) => c.query(`DROP ROLE IF EXISTS ${role}`));
  });

  it('pins every session: date, interval, time zone, float and bytea formats, RLS, search_path, timeouts', async () => {
    const client = await connections.client('src');
    try {
      // docs/moving-data.md's list ("Every session is pinned"), as PostgreSQL reports each setting back.
      const documented: Record<string, string> = {
        DateStyle: 'ISO, YMD',
        IntervalStyle: 'postgres',
        TimeZone: 'UTC',
        extra_float_digits: '3',
        bytea_output: 'hex',
        client_encoding: 'UTF8',
        row_security: 'off',
        search_path: '',
        statement_timeout: '10min',
        lock_timeout: '5s',
      };
      const { rows } = await client.query<{ name: string; value: string }>(
        'SELECT name, current_setting(name) AS value FROM unnest($1::text[]) AS name',
        [Object.keys(documented)],
      );
      expect(Object.fromEntries(rows.map((r) => [r.name, r.value]))).toEqual(documented);
    } finally {
      await client.end();
    }
  });

  it('resumes a chunk from its committed checkpoint, one short slice after another', async () => {
    const env = new MockActivityEnvironment();
    const first: CopyChunkResult = await env.run(activities.copyChunk, input({ sliceMs: 0 }));
    expect(first).toMatchObject({ rows: 100, batches: 1, checkpoint: { lastKey: ['100'], rowsCopied: 100, done: false } });
    const second: CopyChunkResult = await env.run(activities.copyChunk, input({ fence: 11, sliceMs: 0 }));
    expect(second.checkpoint).toEqual({ lastKey: ['200'], rowsCopied: 200, done: false });
    const rest: CopyChunkResult = await env.run(activities.copyChunk, input({ fence: 12 }));
    expect(rest.checkpoint).toEqual({ lastKey: ['1000'], rowsCopied: 1000, done: true });
    expect(rest.rows).toBe(800);
    const [{ n, sum }] = await dbs.query<{ n: number; sum: string }>('target', 'SELECT count(*)::int AS n, sum(id)::text AS sum FROM public.items');
    expect({ n, sum }).toEqual({ n: 1000, sum: '500500' });
  });

  it('stops a zombie attempt (older fence token) before it writes anything', async () => {
    await dbs.exec('target', `UPDATE _ferry.checkpoints SET last_key = NULL, rows_copied = 0, done = false; TRUNCATE public.items;`);
    const newer = new MockActivityEnvironment({ attempt: 1 });
    await newer.run(activities.copyChunk, input({ fence: 20, sliceMs: 0 }));
    const zombie = new MockActivityEnvironment({ attempt: 5 });
    const err = (await zombie.run(activities.copyChunk, input({ fence: 19 })).catch((e: unknown) => e)) as ApplicationFailure;
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err.type).toBe('Superseded');
    expect(err.nonRetryable).toBe(true);
    const [{ n }] = await dbs.query<{ n: number }>('target', 'SELECT count(*)::int AS n FROM public.items');
    expect(n).toBe(100);
  });

  it('rolls back only objects of the recorded kind, whatever text the bookkeeping holds', async () => {
    await withClient(dbs.url('rollback'), (c) => ensureBookkeeping(c));
    await dbs.exec(
      'rollback',
      `CREATE TABLE public.keep (id int); CREATE TABLE public."made by ferry" (id int); CREATE TYPE public.mood AS ENUM ('ok');
       INSERT INTO _ferry.migrations (id, plan) VALUES ('m9', '{}');
       CREATE SCHEMA "made ""schema""";
       INSERT INTO _ferry.created_objects VALUES
         ('m9', 0, 'schema', '"made ""schema"""'),
         ('m9', 1, 'type', 'public.mood'),
         ('m9', 2, 'table', 'public."made by ferry"'),
         ('m9', 3, 'table', 'public.gone_already'),
         ('m9', 4, 'table', 'public.keep; DROP TABLE public.keep'),
         ('m9', 5, 'schema', 'public CASCADE; DROP TABLE public.keep; --');`,
    );
    const { dropped } = await activities.dropTargetObjects({ migrationId: 'm9', target: 'rb' });
    expect(dropped).toEqual(['table public."made by ferry"', 'type public.mood', 'schema "made ""schema"""']);
    const left = await dbs.query<{ t: string }>('rollback', `SELECT string_agg(relname, ',' ORDER BY relname) AS t FROM pg_class WHERE relnamespace = 'public'::regnamespace`);
    expect(left[0].t).toBe('keep');
    expect(await dbs.query('rollback', `SELECT 1 FROM pg_namespace WHERE nspname IN ('_ferry', 'made "schema"')`)).toHaveLength(0);
  });

  it('upgrades bookkeeping an older Ferry left, and refuses to resume checkpoints that lack their plan', async () => {
    await withClient(adminUrl(), (c) => c.query(`DROP DATABASE IF EXISTS ${dbs.names.rollback} WITH (FORCE)`));
    await withClient(adminUrl(), (c) => c.query(`CREATE DATABASE ${dbs.names.rollback}`));
    await dbs.exec('rollback', `CREATE SCHEMA _ferry; CREATE TABLE _ferry.migrations (id text PRIMARY KEY, prepared_at timestamptz NOT NULL DEFAULT now());
      INSERT INTO _ferry.migrations (id) VALUES ('old');`);
    await withClient(dbs.url('rollback'), (c) => ensureBookkeeping(c));
    const plan = {
      sourceServer: '15',
      targetServer: '15',
      tables: [{ ...table, chunks: [{ index: 0, lower: null, upper: null }], rowsEstimated: 10, targetExisted: false, sourceWrites: 0 }],
    };
    await dbs.exec('rollback', `INSERT INTO _ferry.migrations (id, plan) VALUES ('new', '${JSON.stringify(plan)}')`);
    expect(await activities.storedPlan({ migrationId: 'new', target: 'rb' })).toEqual(plan);
    expect(await activities.storedPlan({ migrationId: 'absent', target: 'rb' })).toBeNull();
    const err = (await activities.storedPlan({ migrationId: 'old', target: 'rb' }).catch((e: unknown) => e)) as ApplicationFailure;
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err.type).toBe('PlanNotStored');
    expect(err.nonRetryable).toBe(true);
  });

  it('refuses a table whose row-level security would hide rows from Ferry', async () => {
    const spec = parseSpec({ source: 'limited', target: 'dst', tables: ['public.secret'] });
    const err = (await new MockActivityEnvironment().run(activities.preflight, { migrationId: 'rls', spec }).catch((e: unknown) => e)) as ApplicationFailure;
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect(err.type).toBe('RowSecurity');
    expect(err.message).toMatch(/public\.secret on connection "limited" is not fully readable: row-level security/);
  });
});
