/**
 * The online apply (syncChanges) against real PostgreSQL, called directly: changes whose keys
 * reach the target in different batches must not trip the target's unique indexes, and the
 * apply's delete-and-reinsert must not fire the target's foreign-key actions or triggers; and no
 * apply — the cutover's final drain is one — may pass while capture is not fully in place.
 */
import { CAPTURE_BOOKKEEPING } from '../../src/db/capture-sql';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment as SdkMockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { copyTableOf, MigrationPlan } from '../../src/core/plan';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { parseSpec } from '../../src/core/spec';
import { objectInventory, rowsAsText, TestDatabases } from '../helpers/databases';
import { eventually } from '../helpers/stack';
import { applyKeys, shareByKeyHash, SyncResult } from '../../activities/sync-changes';
import { Client } from 'pg';
import { assertCaptureIntact, captureSuspects } from '../../src/db/capture-check';

class MockActivityEnvironment extends SdkMockActivityEnvironment {
  /** `waitedMs`: how long ago the attempt was scheduled (the time it waited for a worker slot). */
  constructor(waitedMs?: number) {
    super(waitedMs === undefined ? undefined : { currentAttemptScheduledTimestampMs: Date.now() - waitedMs }, { logger: new DefaultLogger('ERROR') });
  }
}

describe('the online apply', () => {
  let dbs: TestDatabases;
  let connections: ConnectionRegistry;
  let activities: ReturnType<typeof createActivities>;
  const run = <T>(fn: () => Promise<T>): Promise<T> => new MockActivityEnvironment().run(fn) as Promise<T>;

  beforeEach(async () => {
    dbs = await TestDatabases.create('apply', ['source', 'target']);
    const env = { FERRY_CONN_SRC: dbs.url('source'), FERRY_CONN_DST: dbs.url('target') };
    connections = new ConnectionRegistry({ env });
    activities = createActivities({ connections, logger: silentLogger(), env });
  });

  afterEach(async () => {
    await connections?.close();
    await dbs?.drop();
  });

  /** preflight, prepareTarget and capture as a migration would run them, for `tables`. */
  async function migrate(id: string, tables: string[], truncate = false): Promise<MigrationPlan> {
    const spec = parseSpec({ id, source: 'src', target: 'dst', mode: 'online', tables, truncate });
    const plan = await run(() => activities.preflight({ migrationId: id, spec }));
    await run(() => activities.prepareTarget({ migrationId: id, source: 'src', target: 'dst', plan, truncate }));
    await run(() =>
      activities.installCapture({
        migrationId: id,
        source: 'src',
        tables: plan.tables.map((t) => ({ index: t.index, source: t.source, keyColumns: t.keyColumns })),
        armFreeze: true,
      }),
    );
    return plan;
  }

  const sync = (id: string, plan: MigrationPlan, index: number, batchKeys: number, options: { lanes?: number; recordDirty?: boolean } = {}) =>
    run(() =>
      activities.syncChanges({
        migrationId: id,
        source: 'src',
        target: 'dst',
        table: copyTableOf(plan.tables[index]),
        fence: Date.now(),
        sliceMs: 30_000,
        batchKeys,
        recordDirty: options.recordDirty ?? false,
        returnWhenCaughtUp: true,
        ...(options.lanes ? { lanes: options.lanes } : {}),
      }),
    );

  it('applies a round over several lanes, each its share of the keys in a transaction of its own, and records them all as dirty', async () => {
    await dbs.exec('source', `CREATE TABLE public.things (id int PRIMARY KEY, v text);
      INSERT INTO public.things SELECT g, 'old' FROM generate_series(1, 300) g;`);
    const plan = await migrate('lanes', ['public.things']);
    await run(() =>
      activities.copyChunk({ migrationId: 'lanes', source: 'src', target: 'dst', table: copyTableOf(plan.tables[0]), chunk: { ...plan.tables[0].chunks[0] }, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }),
    );
    await dbs.exec('source', `UPDATE public.things SET v = 'new' WHERE id <= 200; DELETE FROM public.things WHERE id > 290; INSERT INTO public.things VALUES (301, 'new')`);
    const changed = [...Array.from({ length: 200 }, (_, i) => i + 1), ...Array.from({ length: 11 }, (_, i) => 291 + i)];
    const shares = shareByKeyHash(changed.map((id) => [String(id)]), 3);
    expect(shares.every((share) => share.length > 0)).toBe(true);
    const locked = Number(shares[0][0][0]);
    // A row of the first share held locked on the target: its lane waits, the other two commit.
    const holder = new Client({ connectionString: dbs.url('target') });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM public.things WHERE id = $1 FOR UPDATE', [locked]);
      const syncing = sync('lanes', plan, 0, 1000, { lanes: 3, recordDirty: true });
      syncing.catch(() => undefined);
      const shareApplied = async (share: string[][]) => {
        const ids = share.map((k) => Number(k[0])).filter((id) => id <= 200);
        const rows = await dbs.query<{ n: number }>('target', `SELECT count(*)::int AS n FROM public.things WHERE id = ANY ($1::int[]) AND v = 'new'`, [ids]);
        return rows[0].n === ids.length;
      };
      await eventually(async () => (await shareApplied(shares[1])) && (await shareApplied(shares[2])), 4_000, 50);
      expect(await shareApplied(shares[0])).toBe(false);
      await holder.query('COMMIT');
      const r = await syncing;
      expect(r.applied).toBe(changed.length);
    } finally {
      await holder.end();
    }
    expect(await rowsAsText(dbs, 'target', 'public.things', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.things', 'id'));
    const dirty = await dbs.query<{ id: number }>('target', `SELECT pk[1]::int AS id FROM _ferry.dirty WHERE migration_id = 'lanes' ORDER BY 1`);
    expect(dirty.map((d) => d.id)).toEqual(changed);
  });

  it('applies a key changed to an equal but different value (numeric 1.0 to 1.00, a case-insensitive text), with and without other columns, and leaves a generated key to the target', async () => {
    await dbs.exec('source', `CREATE COLLATION public.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
      CREATE TABLE public.amounts (k numeric PRIMARY KEY, v text);
      INSERT INTO public.amounts VALUES (1.0, 'a'), (2.5, 'b');
      CREATE TABLE public.codes (code text COLLATE public.ci PRIMARY KEY);
      INSERT INTO public.codes VALUES ('abc'), ('xyz');
      CREATE TABLE public.slugs (name text NOT NULL, slug text GENERATED ALWAYS AS (lower(name)) STORED PRIMARY KEY, v int);
      INSERT INTO public.slugs VALUES ('Home', DEFAULT, 1);`);
    await dbs.exec('target', `CREATE COLLATION public.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`);
    const plan = await migrate('equal-keys', ['public.amounts', 'public.codes', 'public.slugs']);
    for (const table of plan.tables) {
      await run(() =>
        activities.copyChunk({ migrationId: 'equal-keys', source: 'src', target: 'dst', table: copyTableOf(table), chunk: { ...table.chunks[0] }, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }),
      );
    }
    // Equal under the key's equality, different as stored: the trigger logs the new key only.
    // A generated key is computed on the target, never set: the rest of its row still arrives.
    await dbs.exec('source', `UPDATE public.amounts SET k = 1.00 WHERE k = 1; UPDATE public.codes SET code = 'ABC' WHERE code = 'abc'; UPDATE public.slugs SET v = 2;`);
    for (const index of [0, 1, 2]) await sync('equal-keys', plan, index, 1000);
    expect(await rowsAsText(dbs, 'target', 'public.slugs', 'slug')).toEqual(['(Home,home,2)']);
    expect(await rowsAsText(dbs, 'target', 'public.amounts', 'k')).toEqual(await rowsAsText(dbs, 'source', 'public.amounts', 'k'));
    expect(await dbs.query('target', `SELECT k::text FROM public.amounts ORDER BY k`)).toEqual([{ k: '1.00' }, { k: '2.5' }]);
    expect(await dbs.query('target', `SELECT code FROM public.codes ORDER BY code COLLATE "C"`)).toEqual([{ code: 'ABC' }, { code: 'xyz' }]);
  });

  it('applies two rows that swapped a unique value in one transaction, one batch at a time', async () => {
    await dbs.exec('source', `CREATE TABLE public.users (id int PRIMARY KEY, email text NOT NULL UNIQUE, note text);
      INSERT INTO public.users SELECT g, 'u' || g || '@x', 'n' FROM generate_series(1, 100) g;`);
    const plan = await migrate('swap', ['public.users']);
    // The copy and the unique index, as the table workflow would have them by now.
    await dbs.exec('target', `INSERT INTO public.users SELECT g, 'u' || g || '@x', 'n' FROM generate_series(1, 100) g;
      ALTER TABLE public.users ADD CONSTRAINT users_email_key UNIQUE (email);`);
    await dbs.exec('source', `BEGIN;
      UPDATE public.users SET email = 'tmp' WHERE id = 1;
      UPDATE public.users SET email = 'u1@x' WHERE id = 2;
      UPDATE public.users SET email = 'u2@x' WHERE id = 1;
      COMMIT;
      -- and a chain: 3 takes 4's value, 4 takes 5's, 5 takes 3's
      BEGIN;
      UPDATE public.users SET email = 'tmp' WHERE id = 5;
      UPDATE public.users SET email = 'u5@x' WHERE id = 4;
      UPDATE public.users SET email = 'u4@x' WHERE id = 3;
      UPDATE public.users SET email = 'u3@x' WHERE id = 5;
      COMMIT;`);
    // One key per batch: the first batch sees row 1 take u2@x while the target's row 2 still has it.
    for (let i = 0; i < 20; i += 1) {
      const r = await sync('swap', plan, 0, 1);
      if (r.caughtUp && r.pending === 0) break;
    }
    expect(await rowsAsText(dbs, 'target', 'public.users', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.users', 'id'));
  });

  it('keeps one staging table per target session across batches: emptied by each commit, never given a new file', async () => {
    await dbs.exec('source', `CREATE TABLE public.things (id int PRIMARY KEY, v text);
      INSERT INTO public.things SELECT g, 'old' FROM generate_series(1, 300) g;`);
    const plan = await migrate('stage', ['public.things']);
    const table = copyTableOf(plan.tables[0]);
    await run(() => activities.copyChunk({ migrationId: 'stage', source: 'src', target: 'dst', table, chunk: { ...plan.tables[0].chunks[0] }, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }));
    await dbs.exec('source', `UPDATE public.things SET v = 'new' WHERE id <= 200; DELETE FROM public.things WHERE id > 290`);
    const source = new Client({ connectionString: dbs.url('source') });
    const target = new Client({ connectionString: dbs.url('target') });
    await source.connect();
    await target.connect();
    try {
      const files: string[] = [];
      for (let batch = 0; batch < 3; batch += 1) {
        const keys = Array.from({ length: 100 }, (_, i) => [String(batch * 100 + i + 1)]);
        await target.query('BEGIN');
        await applyKeys(source, target, table, keys);
        await target.query('COMMIT');
        const { rows } = await target.query(
          `SELECT relfilenode::text AS file, (SELECT count(*)::int FROM pg_temp.ferry_stage_${table.index}) AS staged FROM pg_class WHERE oid = 'pg_temp.ferry_stage_${table.index}'::regclass`,
        );
        expect(rows[0].staged).toBe(0);
        files.push(rows[0].file);
      }
      // TRUNCATE would give the table a new file (and its pg_class row a new version) every batch.
      expect(new Set(files).size).toBe(1);
    } finally {
      await source.end();
      await target.end();
    }
    expect(await rowsAsText(dbs, 'target', 'public.things', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.things', 'id'));
  });

  it('applies to a table whose key is an identity column GENERATED ALWAYS, with and without a unique index beside it', async () => {
    await dbs.exec('source', `CREATE TABLE public.users (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL UNIQUE, note text);
      INSERT INTO public.users (email, note) SELECT 'u' || g || '@x', 'n' FROM generate_series(1, 50) g;
      CREATE TABLE public.notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text);
      INSERT INTO public.notes (body) SELECT 'b' || g FROM generate_series(1, 50) g;`);
    const plan = await migrate('identity', ['public.users', 'public.notes']);
    for (const t of plan.tables) {
      await run(() =>
        activities.copyChunk({ migrationId: 'identity', source: 'src', target: 'dst', table: copyTableOf(t), chunk: { ...t.chunks[0] }, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }),
      );
    }
    await dbs.exec('target', 'ALTER TABLE public.users ADD CONSTRAINT users_email_key UNIQUE (email)');
    await dbs.exec('source', `UPDATE public.users SET note = 'changed' WHERE id <= 5; DELETE FROM public.users WHERE id = 6;
      INSERT INTO public.users (email, note) VALUES ('new@x', 'new');
      UPDATE public.notes SET body = 'changed' WHERE id <= 5; DELETE FROM public.notes WHERE id = 6; INSERT INTO public.notes (body) VALUES ('new');`);
    for (const index of [0, 1]) expect((await sync('identity', plan, index, 100)).applied).toBe(7);
    for (const table of ['public.users', 'public.notes']) {
      expect(await rowsAsText(dbs, 'target', table, 'id')).toEqual(await rowsAsText(dbs, 'source', table, 'id'));
    }
  });

  it('vacuums the change log itself once a slice has applied and deleted a large backlog from it', async () => {
    await dbs.exec('source', `CREATE TABLE public.counters (id int PRIMARY KEY, n int NOT NULL);
      INSERT INTO public.counters SELECT g, 0 FROM generate_series(1, 30000) g;`);
    const plan = await migrate('vacuum', ['public.counters']);
    await run(() =>
      activities.copyChunk({ migrationId: 'vacuum', source: 'src', target: 'dst', table: copyTableOf(plan.tables[0]), chunk: { ...plan.tables[0].chunks[0] }, batchRows: 10000, fence: Date.now(), sliceMs: 30_000 }),
    );
    // Two updates of every row: 60,000 log rows, past the slice's vacuum threshold.
    await dbs.exec('source', 'UPDATE public.counters SET n = n + 1; UPDATE public.counters SET n = n + 1;');
    const log = (await dbs.query<{ t: string }>('source', `SELECT tablename AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%\\_0'`))[0].t;
    const vacuumed = async () => (await dbs.query<{ n: string }>('source', `SELECT vacuum_count::text AS n FROM pg_stat_user_tables WHERE schemaname = '_ferry_capture' AND relname = $1`, [log]))[0].n;
    expect(await vacuumed()).toBe('0');
    const r = await sync('vacuum', plan, 0, 20000);
    expect(r.caughtUp).toBe(true);
    expect(Number(await vacuumed())).toBeGreaterThan(0);
    expect(await rowsAsText(dbs, 'target', 'public.counters', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.counters', 'id'));
  });

  it('keeps polling while a ready table is busy (busyDwellMs), returns at once when a look finds the log empty, and within a moment of the freeze', async () => {
    await dbs.exec('source', `CREATE TABLE public.things (id int PRIMARY KEY, v int NOT NULL);
      INSERT INTO public.things SELECT g, 0 FROM generate_series(1, 100) g;`);
    const plan = await migrate('dwell', ['public.things']);
    const table = copyTableOf(plan.tables[0]);
    await run(() => activities.copyChunk({ migrationId: 'dwell', source: 'src', target: 'dst', table, chunk: { ...plan.tables[0].chunks[0] }, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }));
    const slice = (busyDwellMs: number) =>
      run(() => activities.syncChanges({ migrationId: 'dwell', source: 'src', target: 'dst', table, fence: Date.now(), sliceMs: 30_000, batchKeys: 100, recordDirty: false, returnWhenCaughtUp: true, busyDwellMs }));
    // Until the writer has changed a row the target does not have yet.
    const targetBehind = () =>
      eventually(async () => JSON.stringify(await rowsAsText(dbs, 'source', 'public.things', 'id')) !== JSON.stringify(await rowsAsText(dbs, 'target', 'public.things', 'id')), 10_000, 20);
    // A writer: one update every 50 ms, until told to stop.
    const writer = new Client({ connectionString: dbs.url('source') });
    await writer.connect();
    let writing = true;
    const writes = (async () => {
      for (let i = 0; writing; i += 1) {
        await writer.query('UPDATE public.things SET v = v + 1 WHERE id = $1', [1 + (i % 100)]);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    try {
      await targetBehind();
      // Busy: one activity runs round after round for the dwell (without it: one round, then back).
      const started = Date.now();
      const busy = await slice(2_000);
      expect(busy.rounds).toBeGreaterThanOrEqual(3);
      expect(Date.now() - started).toBeGreaterThanOrEqual(2_000);
      expect(busy.crowded).toBeUndefined();
      // Crowded: a slice that waited 3 s for its slot (crowdedAfterMs 1 s) applies what the log
      // holds and returns as soon as it is caught up, saying so; one that waited no time dwells.
      const crowdedSlice = (waitedMs: number) =>
        new MockActivityEnvironment(waitedMs).run(() =>
          activities.syncChanges({ migrationId: 'dwell', source: 'src', target: 'dst', table, fence: Date.now(), sliceMs: 30_000, batchKeys: 100, recordDirty: false, returnWhenCaughtUp: true, busyDwellMs: 2_000, crowdedAfterMs: 1_000 }),
        ) as Promise<SyncResult>;
      await targetBehind();
      const crowdedStarted = Date.now();
      const crowded = await crowdedSlice(3_000);
      expect(crowded.crowded).toBe(true);
      expect(crowded.rounds).toBeGreaterThanOrEqual(1);
      expect(Date.now() - crowdedStarted).toBeLessThan(1_500);
      await targetBehind();
      const uncrowdedStarted = Date.now();
      const uncrowded = await crowdedSlice(0);
      expect(uncrowded.crowded).toBeUndefined();
      expect(Date.now() - uncrowdedStarted).toBeGreaterThanOrEqual(2_000);
    } finally {
      writing = false;
      await writes;
      await writer.end();
    }
    // Idle: the first look at an empty log returns, whatever the dwell.
    await slice(0);
    const idleStarted = Date.now();
    const idle = await slice(20_000);
    expect(idle.rounds).toBe(0);
    expect(Date.now() - idleStarted).toBeLessThan(2_000);
    expect(await rowsAsText(dbs, 'target', 'public.things', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.things', 'id'));

    // Frozen: changes still arriving (in-flight commits, put straight into the log here, since
    // the freeze refuses the table's writers) do not hold the activity past a moment.
    const log = (await dbs.query<{ t: string }>('source', `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%\\_0'`))[0].t;
    let feeding = true;
    let fed = 0;
    const feeder = (async () => {
      while (feeding) {
        fed = Number((await dbs.query<{ id: string }>('source', `INSERT INTO ${log} (pk) VALUES ('{7}') RETURNING id::text AS id`))[0].id);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const consumedUpTo = (id: number) =>
      eventually(async () => (await dbs.query<{ n: string }>('source', `SELECT count(*)::text AS n FROM ${log} WHERE id <= $1`, [id]))[0].n === '0', 10_000, 50);
    try {
      await eventually(async () => fed > 0, 10_000, 20);
      const dwelling = slice(20_000);
      // A first round applied what was fed; a key logged after that round's delete was seen here
      // is applied too: only a later round of the same activity can have read it (it is dwelling).
      await consumedUpTo(fed);
      const later = Number((await dbs.query<{ id: string }>('source', `INSERT INTO ${log} (pk) VALUES ('{8}') RETURNING id::text AS id`))[0].id);
      await consumedUpTo(later);
      const frozenAt = Date.now();
      await run(() => activities.setFreeze({ migrationId: 'dwell', source: 'src', state: 'frozen' }));
      const result = await dwelling;
      expect(result.rounds).toBeGreaterThan(1);
      expect(Date.now() - frozenAt).toBeLessThan(1_500);
    } finally {
      feeding = false;
      await feeder;
    }
    // Begun while frozen: nothing applied, the log left as it is for the cutover's drain.
    await dbs.exec('source', `INSERT INTO ${log} (pk) VALUES ('{9}')`);
    const pendingBefore = (await dbs.query<{ n: number }>('source', `SELECT count(*)::int AS n FROM ${log}`))[0].n;
    const begunFrozen = await slice(20_000);
    expect(begunFrozen).toMatchObject({ applied: 0, rounds: 0, caughtUp: true, pending: pendingBefore });
    expect((await dbs.query<{ n: number }>('source', `SELECT count(*)::int AS n FROM ${log}`))[0].n).toBe(pendingBefore);
    // A drain's slice (no dwell) applies it.
    const drained = await run(() =>
      activities.syncChanges({ migrationId: 'dwell', source: 'src', target: 'dst', table, fence: Date.now(), sliceMs: 30_000, batchKeys: 100, recordDirty: false, returnWhenCaughtUp: true, seal: true }),
    );
    expect(drained).toMatchObject({ caughtUp: true, pending: 0 });
    expect(drained.applied).toBeGreaterThan(0);
  });

  it('re-checks the dirty set: skips keys still waiting in the log, clears matching rows, puts differing ones back into the log', async () => {
    await dbs.exec('source', `CREATE TABLE public.things (id int PRIMARY KEY, v text);
      INSERT INTO public.things SELECT g, 'v' || g FROM generate_series(1, 10) g;`);
    const plan = await migrate('dirty', ['public.things']);
    const table = copyTableOf(plan.tables[0]);
    await run(() => activities.copyChunk({ migrationId: 'dirty', source: 'src', target: 'dst', table, chunk: { ...plan.tables[0].chunks[0] }, batchRows: 100, fence: Date.now(), sliceMs: 30_000 }));
    await dbs.exec('source', `UPDATE public.things SET v = v || '!' WHERE id <= 5`);
    await run(() =>
      activities.syncChanges({ migrationId: 'dirty', source: 'src', target: 'dst', table, fence: Date.now(), sliceMs: 30_000, batchKeys: 100, recordDirty: true, returnWhenCaughtUp: true }),
    );
    // Key 1 changes again (waiting in the log); key 2's target row goes wrong behind Ferry's back.
    await dbs.exec('source', `UPDATE public.things SET v = 'again' WHERE id = 1`);
    await dbs.exec('target', `UPDATE public.things SET v = 'wrong' WHERE id = 2`);
    const result = await run(() => activities.checkDirtyKeys({ migrationId: 'dirty', source: 'src', target: 'dst', table }));
    expect(result).toEqual({ checked: 4, mismatched: 1, waiting: 1, remaining: 2 });
    const log = (await dbs.query<{ t: string }>('source', `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%\\_0'`))[0].t;
    expect((await dbs.query<{ pk: string[] }>('source', `SELECT DISTINCT pk FROM ${log} ORDER BY pk`)).map((r) => r.pk)).toEqual([['1'], ['2']]);
    expect((await dbs.query<{ pk: string[] }>('target', `SELECT pk FROM _ferry.dirty WHERE migration_id = 'dirty' ORDER BY pk`)).map((r) => r.pk)).toEqual([['1'], ['2']]);
  });

  it("takes a table's sync over at the cutover (seal): afterwards neither a slice nor a re-check of the table's own writes anything, even with the log empty", async () => {
    await dbs.exec('source', `CREATE TABLE public.things (id int PRIMARY KEY, v text);
      INSERT INTO public.things SELECT g, 'v' || g FROM generate_series(1, 10) g;`);
    const plan = await migrate('sealed', ['public.things']);
    const table = copyTableOf(plan.tables[0]);
    const ref = { migrationId: 'sealed', source: 'src', target: 'dst', table };
    const slice = { ...ref, sliceMs: 30_000, batchKeys: 100, recordDirty: true, returnWhenCaughtUp: true };
    await run(() => activities.copyChunk({ ...ref, chunk: { ...plan.tables[0].chunks[0] }, batchRows: 100, fence: Date.now(), sliceMs: 30_000 }));
    await dbs.exec('source', `UPDATE public.things SET v = v || '!' WHERE id <= 5`);
    const tableFence = Date.now();
    await run(() => activities.syncChanges({ ...slice, fence: tableFence }));
    // The table's re-check under its fence works as the unfenced one does.
    await dbs.exec('target', `UPDATE public.things SET v = 'wrong' WHERE id = 2`);
    expect(await run(() => activities.checkDirtyKeys({ ...ref, fence: tableFence + 1 }))).toEqual({ checked: 5, mismatched: 1, waiting: 0, remaining: 1 });
    await run(() => activities.syncChanges({ ...slice, fence: tableFence + 2 }));
    // The log is empty: the drain's sealing slice takes the fence all the same.
    const sealed = await run(() => activities.syncChanges({ ...slice, fence: tableFence + 365 * 24 * 3600_000, seal: true }));
    expect(sealed).toMatchObject({ applied: 0, caughtUp: true, pending: 0 });
    // A table's later slice and re-check (fences from its own clock) stop before writing.
    await dbs.exec('source', `UPDATE public.things SET v = 'late' WHERE id = 3`);
    await dbs.exec('target', `UPDATE public.things SET v = 'wrong again' WHERE id = 4; INSERT INTO _ferry.dirty (migration_id, table_index, pk) VALUES ('sealed', 0, '{4}')`);
    const superseded = async (work: () => Promise<unknown>) => {
      const err = await run(work).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ApplicationFailure);
      expect((err as ApplicationFailure).type).toBe('Superseded');
    };
    await superseded(() => activities.syncChanges({ ...slice, fence: Date.now() + 1000 }));
    await superseded(() => activities.checkDirtyKeys({ ...ref, fence: Date.now() + 1000 }));
    expect(await dbs.query('target', `SELECT v FROM public.things WHERE id IN (3, 4) ORDER BY id`)).toEqual([{ v: 'v3!' }, { v: 'wrong again' }]);
    expect(await dbs.query('target', `SELECT pk FROM _ferry.dirty WHERE migration_id = 'sealed' ORDER BY pk`)).toEqual([{ pk: ['2'] }, { pk: ['4'] }]);
    const log = (await dbs.query<{ t: string }>('source', `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%\\_0'`))[0].t;
    expect((await dbs.query<{ pk: string[] }>('source', `SELECT DISTINCT pk FROM ${log} ORDER BY pk`)).map((r) => r.pk)).toEqual([['3']]);
    // The drain's own next slice applies it.
    await run(() => activities.syncChanges({ ...slice, fence: tableFence + 365 * 24 * 3600_000 + 1 }));
    expect(await dbs.query('target', `SELECT v FROM public.things WHERE id = 3`)).toEqual([{ v: 'late' }]);
  });

  /** Copies every table of `plan` whole, as the full load would. */
  async function copyAll(id: string, plan: MigrationPlan): Promise<void> {
    for (const t of plan.tables) {
      for (const chunk of t.chunks) {
        await run(() => activities.copyChunk({ migrationId: id, source: 'src', target: 'dst', table: copyTableOf(t), chunk: { ...chunk }, batchRows: 1000, fence: Date.now(), sliceMs: 30_000 }));
      }
    }
  }

  it("drains a group at the cutover: every table's sync sealed at once, the quiet ones left at that, the others drained and checked", async () => {
    const names = ['quiet', 'changed', 'stale', 'idle'];
    await dbs.exec('source', names.map((n) => `CREATE TABLE public.${n} (id int PRIMARY KEY, v text); INSERT INTO public.${n} SELECT g, 'v' || g FROM generate_series(1, 50) g;`).join('\n'));
    const plan = await migrate('group', names.map((n) => `public.${n}`));
    await copyAll('group', plan);
    const indexOf = (name: string) => plan.tables.find((t) => t.source.name === name)!.index;
    const tableFence = Date.now();
    const slice = (name: string, fence: number) =>
      run(() => activities.syncChanges({ migrationId: 'group', source: 'src', target: 'dst', table: copyTableOf(plan.tables[indexOf(name)]), fence, sliceMs: 30_000, batchKeys: 100, recordDirty: true, returnWhenCaughtUp: true }));
    // stale: a change applied (so dirty), then its target row damaged behind Ferry's back; idle: a change applied and re-checked.
    await dbs.exec('source', `UPDATE public.stale SET v = 'new' WHERE id <= 3; UPDATE public.idle SET v = 'new' WHERE id <= 3`);
    await slice('stale', tableFence);
    await slice('idle', tableFence);
    await run(() => activities.checkDirtyKeys({ migrationId: 'group', source: 'src', target: 'dst', table: copyTableOf(plan.tables[indexOf('idle')]), fence: tableFence + 1 }));
    await dbs.exec('target', `UPDATE public.stale SET v = 'damaged' WHERE id = 2`);
    // changed: still in its log at the freeze.
    await dbs.exec('source', `UPDATE public.changed SET v = 'late' WHERE id > 45; DELETE FROM public.changed WHERE id = 1`);
    const sealFence = tableFence + 365 * 24 * 3600_000;
    const { tables } = await run(() =>
      activities.drainTables({ migrationId: 'group', source: 'src', target: 'dst', tables: plan.tables.map(copyTableOf), fence: sealFence, sliceMs: 30_000, batchKeys: 100, check: true }),
    );
    expect(Object.fromEntries(tables.map((t) => [plan.tables[t.index].source.name, t]))).toEqual({
      quiet: { index: indexOf('quiet'), checked: 0, mismatched: 0, remaining: 0 },
      idle: { index: indexOf('idle'), checked: 0, mismatched: 0, remaining: 0 },
      changed: { index: indexOf('changed'), checked: 6, mismatched: 0, remaining: 0 },
      // Its first check found the damaged row and put it back into the log; the second drain repaired it.
      stale: { index: indexOf('stale'), checked: 1, mismatched: 0, remaining: 0 },
    });
    for (const n of names) expect(await rowsAsText(dbs, 'target', `public.${n}`, 'id')).toEqual(await rowsAsText(dbs, 'source', `public.${n}`, 'id'));
    // The quiet tables hold the seal's fence (slice 0 of the first attempt); the others a drain slice's, above it.
    const tokens = await dbs.query<{ table_index: number; token: string }>('target', `SELECT table_index, owner_token::text AS token FROM _ferry.checkpoints WHERE migration_id = 'group' AND chunk_index = -1 ORDER BY 1`);
    const sealed = String(sealFence * 1000 + 1);
    expect(tokens.filter((t) => t.token === sealed).map((t) => plan.tables[t.table_index].source.name).sort()).toEqual(['idle', 'quiet']);
    expect(tokens.filter((t) => BigInt(t.token) > BigInt(sealed)).map((t) => plan.tables[t.table_index].source.name).sort()).toEqual(['changed', 'stale']);
    // A quiet table's own slice afterwards writes nothing: the seal took its fence too.
    await dbs.exec('source', `UPDATE public.quiet SET v = 'after' WHERE id = 1`);
    const err = await slice('quiet', Date.now()).catch((e: unknown) => e);
    expect((err as ApplicationFailure).type).toBe('Superseded');
    expect(await dbs.query('target', `SELECT v FROM public.quiet WHERE id = 1`)).toEqual([{ v: 'v1' }]);
  });

  it("checks the capture of a group in set form exactly as it checks each table's: the same tables found wanting", async () => {
    const names = ['fine', 'dropped', 'origin', 'altered', 'unregistered'];
    await dbs.exec('source', `${names.map((n) => `CREATE TABLE public.${n} (id int PRIMARY KEY, v text);`).join('\n')}
      CREATE TABLE public.parted (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
      CREATE TABLE public.parted_a PARTITION OF public.parted FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
      CREATE TABLE public.grown (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
      CREATE TABLE public.grown_a PARTITION OF public.grown FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
      CREATE TABLE public.fine_parted (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
      CREATE TABLE public.fine_parted_a PARTITION OF public.fine_parted FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');`);
    const all = [...names, 'parted', 'grown', 'fine_parted'];
    const plan = await migrate('suspects', all.map((n) => `public.${n}`));
    const tables = plan.tables.map(copyTableOf);
    const byName = (name: string) => tables.find((t) => t.source.name === name)!;
    const named = (found: { source: { name: string } }[]) => found.map((t) => t.source.name).sort();
    /** The tables whose own check throws, with what it throws. */
    const oneByOne = async () => {
      const failed: { source: { name: string } }[] = [];
      await connections.withClient('src', async (db) => {
        for (const table of tables) if (await assertCaptureIntact(db, { migrationId: 'suspects', table }).then(() => false, () => true)) failed.push(table);
      });
      return named(failed);
    };
    const inSetForm = () => connections.withClient('src', async (db) => named(await captureSuspects(db, 'suspects', tables)));
    expect(await inSetForm()).toEqual([]);
    expect(await oneByOne()).toEqual([]);

    const trigger = async (table: string, like: string) =>
      (await dbs.query<{ tgname: string }>('source', `SELECT tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE $2`, [table, like]))[0].tgname;
    const capture = await trigger('public.fine', 'ferry\\_capture\\_%');
    const truncate = await trigger('public.fine', 'ferry\\_no\\_truncate\\_%');
    // Without superuser there is no DDL guard: the tables' owner may do all of this.
    await dbs.exec('source', `DO $$ DECLARE t text; BEGIN FOR t IN SELECT evtname FROM pg_event_trigger LOOP EXECUTE format('DROP EVENT TRIGGER %I', t); END LOOP; END $$;
      DROP TRIGGER ${capture} ON public.dropped;
      ALTER TABLE public.origin ENABLE TRIGGER ${capture};
      ALTER TABLE public.altered ADD COLUMN extra int;
      ALTER TABLE public.parted_a DISABLE TRIGGER ${truncate};
      CREATE TABLE public.grown_b PARTITION OF public.grown FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
      DELETE FROM _ferry_capture.captures WHERE migration_id = 'suspects' AND table_index = ${byName('unregistered').index};`);
    const wanting = ['altered', 'dropped', 'grown', 'origin', 'parted', 'unregistered'];
    expect(await oneByOne()).toEqual(wanting);
    expect(await inSetForm()).toEqual(wanting);
    // The drain names the table whose capture is lost, as its slice of that table would have.
    const group = [byName('fine'), byName('dropped')];
    const err = (await run(() =>
      activities.drainTables({ migrationId: 'suspects', source: 'src', target: 'dst', tables: group, fence: Date.now() + 365 * 24 * 3600_000, sliceMs: 30_000, batchKeys: 100, check: true }),
    ).catch((e: unknown) => e)) as ApplicationFailure;
    expect({ type: err.type, details: err.details }).toEqual({ type: 'CaptureLost', details: [{ tableIndex: byName('dropped').index }] });
    expect(err.message).toContain(`trigger ${capture} on public.dropped was dropped`);
  });

  it('replaces rows of a prepared target without firing its cascading foreign keys or its triggers', async () => {
    const ddl = `CREATE TABLE public.parents (id int PRIMARY KEY, name text);
      CREATE TABLE public.children (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES public.parents (id) ON DELETE CASCADE);`;
    await dbs.exec('source', `${ddl}
      INSERT INTO public.parents SELECT g, 'p' || g FROM generate_series(1, 10) g;
      INSERT INTO public.children SELECT g, 1 + g % 10 FROM generate_series(1, 50) g;`);
    // The user's own target, created beforehand, with a cascade and an audit trigger.
    await dbs.exec('target', `${ddl}
      CREATE TABLE public.audit (at timestamptz DEFAULT now(), what text);
      CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.audit (what) VALUES (TG_OP); RETURN NULL; END $$;
      CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.parents FOR EACH ROW EXECUTE FUNCTION public.audit();`);
    const plan = await migrate('cascade', ['public.parents', 'public.children']);
    for (const chunk of [0]) {
      for (const t of plan.tables) {
        await run(() =>
          activities.copyChunk({
            migrationId: 'cascade',
            source: 'src',
            target: 'dst',
            table: copyTableOf(t),
            chunk: { ...t.chunks[chunk] },
            batchRows: 1000,
            fence: Date.now(),
            sliceMs: 30_000,
          }),
        );
      }
    }
    await dbs.exec('source', `UPDATE public.parents SET name = 'renamed' WHERE id IN (1, 2, 3)`);
    const r = await sync('cascade', plan, 0, 100);
    expect(r.applied).toBe(3);
    for (const [table, key] of [
      ['public.parents', 'id'],
      ['public.children', 'id'],
    ]) {
      expect(await rowsAsText(dbs, 'target', table, key)).toEqual(await rowsAsText(dbs, 'source', table, key));
    }
    expect(await dbs.query('target', 'SELECT * FROM public.audit')).toEqual([]);
  });

  it('refuses to apply while a capture trigger is missing or does not fire for every session', async () => {
    await dbs.exec('source', `CREATE TABLE public.notes (id int PRIMARY KEY, body text);
      INSERT INTO public.notes SELECT g, 'n' || g FROM generate_series(1, 10) g;`);
    const plan = await migrate('intact', ['public.notes']);
    await dbs.exec('target', `INSERT INTO public.notes SELECT g, 'n' || g FROM generate_series(1, 10) g`);
    const [{ capture, truncate }] = await dbs.query<{ capture: string; truncate: string }>(
      'source',
      `SELECT max(tgname) FILTER (WHERE tgname LIKE 'ferry\\_capture\\_%') AS capture, max(tgname) FILTER (WHERE tgname LIKE 'ferry\\_no\\_truncate\\_%') AS truncate
         FROM pg_trigger WHERE tgrelid = 'public.notes'::regclass`,
    );
    const failure = async () => (await sync('intact', plan, 0, 100).catch((e: unknown) => e)) as ApplicationFailure;
    // Without superuser there is no DDL guard, and the table's owner may alter its triggers.
    await dbs.exec('source', `DO $$ DECLARE t text; BEGIN FOR t IN SELECT evtname FROM pg_event_trigger LOOP EXECUTE format('DROP EVENT TRIGGER %I', t); END LOOP; END $$`);

    // ENABLE (without ALWAYS): the trigger no longer fires for sessions that write as a replica.
    await dbs.exec('source', `ALTER TABLE public.notes ENABLE TRIGGER ${capture}`);
    let err = await failure();
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect({ type: err.type, nonRetryable: err.nonRetryable }).toEqual({ type: 'CaptureLost', nonRetryable: true });
    expect(err.message).toContain(`trigger ${capture} on public.notes is enabled for origin sessions only`);

    await dbs.exec('source', `ALTER TABLE public.notes ENABLE ALWAYS TRIGGER ${capture}; UPDATE public.notes SET body = 'logged' WHERE id = 1`);
    expect((await sync('intact', plan, 0, 100)).applied).toBe(1);

    await dbs.exec('source', `DROP TRIGGER ${truncate} ON public.notes`);
    err = await failure();
    expect(err.type).toBe('CaptureLost');
    expect(err.message).toContain(`trigger ${truncate} on public.notes was dropped`);
    expect(await rowsAsText(dbs, 'target', 'public.notes', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.notes', 'id'));
  });

  it('removes capture from a partitioned table and all its partitions', async () => {
    // Several partitions, so that some come before the partitioned table in any unordered listing.
    await dbs.exec('source', `CREATE TABLE public.events (id int, part int, PRIMARY KEY (id, part)) PARTITION BY LIST (part);
      ${[0, 1, 2, 3, 4, 5].map((p) => `CREATE TABLE public.events_${p} PARTITION OF public.events FOR VALUES IN (${p});`).join('\n')}
      INSERT INTO public.events SELECT g, g % 6 FROM generate_series(1, 60) g;`);
    const tables = `CREATE TABLE public.events (id int, part int, PRIMARY KEY (id, part)) PARTITION BY LIST (part);
      CREATE TABLE public.events_all PARTITION OF public.events DEFAULT;`;
    await dbs.exec('target', tables);
    const before = await objectInventory(dbs, 'source');
    await migrate('partitioned', ['public.events']);
    expect(await dbs.query('source', `SELECT count(*)::int AS n FROM pg_trigger WHERE tgname LIKE 'ferry\\_capture\\_%'`)).toEqual([{ n: 7 }]);
    const { pending } = await run(() => activities.releaseSource({ migrationId: 'partitioned', source: 'src', freeze: 'remove' }));
    expect(pending).toEqual([]);
    expect(await objectInventory(dbs, 'source')).toEqual(before);
  });

  it('keeps one migration\'s capture on a database while another migration that targets the same database rolls back', async () => {
    await dbs.exec('source', `CREATE TABLE public.users (id int PRIMARY KEY, note text);
      INSERT INTO public.users SELECT g, 'n' FROM generate_series(1, 50) g;`);
    await dbs.exec('target', `CREATE TABLE public.back (id int PRIMARY KEY, note text);
      INSERT INTO public.back SELECT g, 'b' FROM generate_series(1, 20) g;`);
    // Migration a: source → target, online (capture on the source database).
    const plan = await migrate('a', ['public.users']);
    await dbs.exec('target', `INSERT INTO public.users SELECT g, 'n' FROM generate_series(1, 50) g`);
    // Migration b: target → source (its bookkeeping on the source database), then rolled back.
    const spec = parseSpec({ id: 'b', source: 'dst', target: 'src', tables: ['public.back'] });
    const planB = await run(() => activities.preflight({ migrationId: 'b', spec }));
    await run(() => activities.prepareTarget({ migrationId: 'b', source: 'dst', target: 'src', plan: planB, truncate: false }));
    await run(() => activities.dropTargetObjects({ migrationId: 'b', target: 'src' }));
    expect(await dbs.query('source', `SELECT to_regclass('public.back') AS t`)).toEqual([{ t: null }]);
    // a's capture survived b's rollback: a write made now reaches the target through the sync.
    await dbs.exec('source', `UPDATE public.users SET note = 'after' WHERE id <= 5; DELETE FROM public.users WHERE id = 50`);
    await sync('a', plan, 0, 100);
    expect(await rowsAsText(dbs, 'target', 'public.users', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.users', 'id'));
  });

  it('versions its own schemas: bookkeeping of an unversioned Ferry is upgraded step by step, a newer version refused', async () => {
    // As a Ferry from before the versions left it: its four tables, the plan but no completed_at.
    await dbs.exec('target', `CREATE SCHEMA _ferry; CREATE TABLE _ferry.migrations (id text PRIMARY KEY, prepared_at timestamptz NOT NULL DEFAULT now(), plan jsonb);
      CREATE TABLE _ferry.created_objects (migration_id text NOT NULL, seq int NOT NULL, kind text NOT NULL, name text NOT NULL, PRIMARY KEY (migration_id, seq));
      CREATE TABLE _ferry.checkpoints (migration_id text NOT NULL, table_index int NOT NULL, chunk_index int NOT NULL, last_key text[], rows_copied bigint NOT NULL DEFAULT 0,
        done boolean NOT NULL DEFAULT false, owner_token bigint NOT NULL DEFAULT 0, owner text, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (migration_id, table_index, chunk_index));
      CREATE TABLE _ferry.dirty (migration_id text NOT NULL, table_index int NOT NULL, pk text[] NOT NULL, PRIMARY KEY (migration_id, table_index, pk));
      INSERT INTO _ferry.migrations (id) VALUES ('older');`);
    await dbs.exec('source', `CREATE TABLE public.users (id int PRIMARY KEY, note text)`);
    const plan = await migrate('upgrade', ['public.users']);
    expect(await dbs.query('target', `SELECT version, name FROM _ferry.schema_versions ORDER BY version`)).toEqual([
      { version: 1, name: 'migrations, created objects, checkpoints, dirty keys (found in place)' },
      { version: 2, name: 'migrations.plan (found in place)' },
      { version: 3, name: 'migrations.completed_at' },
      { version: 4, name: 'created_objects.kind objects' },
    ]);
    expect(await dbs.query('target', `SELECT id, completed_at FROM _ferry.migrations ORDER BY id`)).toEqual([
      { id: 'older', completed_at: null },
      { id: 'upgrade', completed_at: null },
    ]);
    // Capture's schema at its newest version (3: the marks of a source before PostgreSQL 14).
    expect(await dbs.query('source', `SELECT max(version) AS v FROM _ferry_capture.schema_versions`)).toEqual([{ v: CAPTURE_BOOKKEEPING.steps.length }]);
    expect(CAPTURE_BOOKKEEPING.steps.length).toBe(4);
    // Capture and bookkeeping never share a schema.
    expect(await dbs.query('source', `SELECT nspname FROM pg_namespace WHERE nspname = '_ferry'`)).toEqual([]);

    await dbs.exec('target', `INSERT INTO _ferry.schema_versions (version, name) VALUES (99, 'from a newer Ferry')`);
    const refused = await run(() => activities.prepareTarget({ migrationId: 'too-new', source: 'src', target: 'dst', plan, truncate: false })).catch((e: Error) => e);
    expect(refused).toBeInstanceOf(Error);
    expect((refused as Error).message).toMatch(/_ferry is at version 99, newer than this Ferry knows \(4\)/);
    expect(await dbs.query('target', `SELECT id FROM _ferry.migrations WHERE id = 'too-new'`)).toEqual([]);
  });
});
