/**
 * Tables without a primary key but with a unique index over NOT NULL columns: Ferry moves them
 * by that index as their key — the narrowest such key, a constraint before a plain index — in
 * full mode and online under writers that change keys, with the key built on the target before
 * any change is applied, and nothing repaired. A unique index that allows NULLs, is partial,
 * deferrable or over an expression is no key: such a table is still refused. A target prepared
 * by the user must have the key; an online migration whose source loses the key's index stops. A
 * unique index in another collation than its column's is no key either, nor a reason for the
 * apply to skip it.
 */
import { displayQualified } from '../../src/core/identifiers';
import { parseSpec } from '../../src/core/spec';
import { readUniqueKeys } from '../../src/db/unique-keys';
import { rowsAsText, TestDatabases, withClient } from '../helpers/databases';
import { directActivities, DirectActivities } from '../helpers/direct-activities';
import { copiedAndApplied, expectCleanRun } from '../helpers/repairs';
import { resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { approveUnderWriters, expectStoppedByFreeze, runWriters } from '../helpers/writers';

const SOURCE = `
  CREATE SCHEMA app;
  -- Keyed by a UNIQUE constraint over NOT NULL columns; email is unique but nullable: no key.
  CREATE TABLE app.members (org int NOT NULL, handle text NOT NULL, email text UNIQUE, score int,
                            CONSTRAINT members_org_handle UNIQUE (org, handle));
  CREATE INDEX members_score ON app.members (score);
  INSERT INTO app.members SELECT g % 20, 'h' || g, 'm' || g || '@example.com', g FROM generate_series(1, 6000) g;
  -- Keyed by the narrower of two plain unique indexes.
  CREATE TABLE app.tokens (token uuid NOT NULL, owner int NOT NULL, note text);
  CREATE UNIQUE INDEX tokens_token_owner ON app.tokens (token, owner);
  CREATE UNIQUE INDEX tokens_token ON app.tokens (token);
  INSERT INTO app.tokens SELECT md5(g::text)::uuid, g % 50, 'n' || g FROM generate_series(1, 3000) g;
  -- Partitioned, keyed by a unique constraint that holds the partition key.
  CREATE TABLE app.readings (sensor int NOT NULL, day int NOT NULL, v int, UNIQUE (sensor, day)) PARTITION BY RANGE (day);
  CREATE TABLE app.readings_a PARTITION OF app.readings FOR VALUES FROM (0) TO (100);
  CREATE TABLE app.readings_b PARTITION OF app.readings FOR VALUES FROM (100) TO (200);
  INSERT INTO app.readings SELECT g / 200, g % 200, g FROM generate_series(1, 4000) g;
  -- A DEFERRABLE primary key, which ON CONFLICT cannot arbitrate.
  CREATE TABLE app.deferred (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v int);
  INSERT INTO app.deferred SELECT g, g FROM generate_series(1, 2000) g;
  -- Unique indexes that are no key: over a nullable column, partial, deferrable, an expression.
  CREATE TABLE app.loose (a int UNIQUE, b int NOT NULL, c int NOT NULL, d int NOT NULL);
  CREATE UNIQUE INDEX loose_b ON app.loose (b) WHERE b > 0;
  ALTER TABLE app.loose ADD CONSTRAINT loose_c UNIQUE (c) DEFERRABLE;
  CREATE UNIQUE INDEX loose_d ON app.loose ((d + 1));
  ANALYZE;`;

const ORDER: Record<string, string> = { 'app.members': 'org, handle', 'app.tokens': 'token', 'app.readings': 'sensor, day', 'app.deferred': 'id' };

/** The table's indexes and constraints as the catalog prints them (names and definitions). */
async function keysAndIndexes(dbs: TestDatabases, role: string, table: string): Promise<string[]> {
  const rows = await dbs.query<{ line: string }>(
    role,
    `SELECT c.relname || ': ' || regexp_replace(pg_get_indexdef(i.indexrelid), ' ON \\S+ ', ' ON … ') ||
            coalesce(' / ' || (SELECT pg_get_constraintdef(con.oid) FROM pg_constraint con WHERE con.conindid = i.indexrelid AND con.conrelid = i.indrelid), '') AS line
       FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass ORDER BY 1`,
    [table],
  );
  return rows.map((r) => r.line);
}

describe('tables keyed by a unique index', () => {
  const suite = stackSuite({
    name: 'unique_key',
    databases: { full_src: SOURCE, full_dst: '', live_src: SOURCE, live_dst: '', lost_src: SOURCE, lost_dst: '' },
  });

  it('plans each table by its narrowest unique key over NOT NULL columns and says so; a table whose unique indexes are no key has none', async () => {
    const plan = await suite.stack.ferry.preflight({ source: 'full_src', target: 'full_dst', tables: ['app.members', 'app.tokens', 'app.readings'] }, 'uk-plan');
    expect(plan.tables.map((t) => [displayQualified(t.source), t.keyColumns.map((k) => k.name)])).toEqual([
      ['app.members', ['org', 'handle']],
      ['app.tokens', ['token']],
      ['app.readings', ['sensor', 'day']],
    ]);
    expect(plan.tables[0].notes).toContain('no primary key: keyed by unique constraint members_org_handle (org, handle), whose columns are NOT NULL');
    expect(plan.tables[1].notes).toContain('no primary key: keyed by unique index tokens_token (token), whose columns are NOT NULL');
    // Those are no key: a table with only them has none (full mode copies it by blocks, online mode refuses it).
    const loose = await suite.stack.ferry.preflight({ source: 'full_src', target: 'full_dst', tables: ['app.loose'] }, 'uk-loose');
    expect(loose.tables[0].keyColumns).toEqual([]);
    await expect(suite.stack.ferry.preflight({ source: 'full_src', target: 'full_dst', mode: 'online', tables: ['app.loose'] }, 'uk-loose-online')).rejects.toThrow(
      'table app.loose has no primary key and no unique index over NOT NULL columns',
    );
  });

  it('moves them in full mode row for row, the key and every index on the target as on the source, nothing repaired', async () => {
    const { ferry } = suite.stack;
    const tables = Object.keys(ORDER);
    await ferry.start({ source: 'full_src', target: 'full_dst', batchRows: 700, tables: tables.map((name) => ({ name, chunks: 3 })) }, { id: 'uk-full' });
    const result = await resultWithin(ferry, 'uk-full', 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(ferry, result);
    for (const table of tables) {
      expect({ table, rows: await rowsAsText(suite.dbs, 'full_dst', table, ORDER[table]) }).toEqual({ table, rows: await rowsAsText(suite.dbs, 'full_src', table, ORDER[table]) });
      expect({ table, indexes: await keysAndIndexes(suite.dbs, 'full_dst', table) }).toEqual({ table, indexes: await keysAndIndexes(suite.dbs, 'full_src', table) });
    }
    expect(await keysAndIndexes(suite.dbs, 'full_dst', 'app.readings_b')).toEqual(await keysAndIndexes(suite.dbs, 'full_src', 'app.readings_b'));
  }, 240_000);

  it('moves them online while writers insert, update, change keys and delete; the target matches and nothing was repaired', async () => {
    const { ferry } = suite.stack;
    const id = 'uk-online';
    await ferry.start(
      {
        source: 'live_src',
        target: 'live_dst',
        mode: 'online',
        batchRows: 700,
        tables: [{ name: 'app.members', chunks: 3 }, 'app.tokens', 'app.deferred'],
        cutover: { approval: 'manual', approvalTimeout: '5m' },
      },
      { id },
    );
    // Writers touch orgs 0–9 and tokens of owners 0–24 only: the other half only the copy brings.
    const writers = await runWriters(suite.dbs.url('live_src'), 3, ({ client, w, nextId }) => {
      const org = () => Math.floor(Math.random() * 10);
      const handle = () => `h${1 + Math.floor(Math.random() * 6000)}`;
      return [
        { kind: 'insert', run: () => client.query(`INSERT INTO app.members VALUES ($1, $2, NULL, 0)`, [org(), `new${nextId()}`]) },
        { kind: 'update', run: () => client.query(`UPDATE app.members SET score = score + 1, email = NULL WHERE org = $1 AND handle = $2`, [org(), handle()]) },
        { kind: 'update key', run: () => client.query(`UPDATE app.members SET handle = $3 WHERE org = $1 AND handle = $2`, [org(), handle(), `moved${nextId()}`]) },
        { kind: 'delete', run: () => client.query(`DELETE FROM app.members WHERE org = $1 AND handle = $2`, [org(), handle()]) },
        {
          kind: 'delete and reinsert',
          run: async () => {
            const [o, h] = [org(), handle()];
            await client.query('BEGIN');
            await client.query(`DELETE FROM app.members WHERE org = $1 AND handle = $2`, [o, h]);
            await client.query(`INSERT INTO app.members VALUES ($1, $2, NULL, -1)`, [o, h]);
            await client.query('COMMIT');
          },
        },
        { kind: 'token note', run: () => client.query(`UPDATE app.tokens SET note = $2 WHERE owner = $1`, [Math.floor(Math.random() * 25), `w${w}`]) },
        { kind: 'deferred', run: () => client.query(`UPDATE app.deferred SET v = v + 1 WHERE id = $1`, [1 + Math.floor(Math.random() * 2000)]) },
        { kind: 'deferred insert', run: () => client.query(`INSERT INTO app.deferred VALUES ($1, 0)`, [nextId()]) },
        { kind: 'token key', run: () => client.query(`UPDATE app.tokens SET token = gen_random_uuid() WHERE token = md5($1::text)::uuid AND owner < 25`, [1 + Math.floor(Math.random() * 3000)]) },
      ];
    });
    const result = await approveUnderWriters(ferry, id, writers, 9, 180_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expectStoppedByFreeze(writers.stats);
    await expectCleanRun(ferry, result);
    // The deferrable key stayed deferrable on the target, and its changes arrived without ON CONFLICT.
    expect(await suite.dbs.query('live_dst', `SELECT condeferrable, condeferred FROM pg_constraint WHERE conrelid = 'app.deferred'::regclass AND contype = 'p'`)).toEqual([
      { condeferrable: true, condeferred: true },
    ]);
    for (const table of ['app.members', 'app.tokens', 'app.deferred']) {
      expect({ table, rows: await rowsAsText(suite.dbs, 'live_dst', table, ORDER[table]) }).toEqual({ table, rows: await rowsAsText(suite.dbs, 'live_src', table, ORDER[table]) });
    }
    // The copy brought the rows no writer touched, the sync the writers' changes.
    const copied = result.tables.find((t) => t.source === 'app.members')!.rowsCopied;
    expect(await copiedAndApplied(suite.dbs, 'live_dst', 'app.members', copied, 3000)).toBeUndefined();
    expect(await keysAndIndexes(suite.dbs, 'live_dst', 'app.members')).toEqual(await keysAndIndexes(suite.dbs, 'live_src', 'app.members'));
  }, 300_000);

  it("stops an online migration whose source loses its key's unique index, before two rows with one key could fold into one", async () => {
    const { ferry } = suite.stack;
    const id = 'uk-lost';
    await ferry.start({ source: 'lost_src', target: 'lost_dst', mode: 'online', tables: ['app.tokens'], cutover: { approval: 'manual', approvalTimeout: '5m' } }, { id });
    await waitForPhase(ferry, id, 'AWAITING_APPROVAL');
    await suite.dbs.exec('lost_src', 'DROP INDEX app.tokens_token');
    await suite.dbs.exec('lost_src', `INSERT INTO app.tokens SELECT token, 99, 'twin' FROM app.tokens WHERE owner = 1 LIMIT 1`);
    const result = await resultWithin(ferry, id, 120_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.message).toContain('app.tokens lost the unique index of its key (token) on the source during the online migration');
  }, 240_000);

  it("refuses a target the user prepared without the source's key, naming what it has", async () => {
    await suite.dbs.exec('full_dst', 'CREATE SCHEMA prepared; CREATE TABLE prepared.tokens (token uuid NOT NULL, owner int NOT NULL, note text, UNIQUE (token, owner))');
    await expect(
      suite.stack.ferry.preflight({ source: 'full_src', target: 'full_dst', tables: [{ name: 'app.tokens', target: 'prepared.tokens' }] }, 'uk-prepared'),
    ).rejects.toThrow(
      "target table prepared.tokens must have the source's key (token) as its primary key or a unique index over NOT NULL columns; it has unique constraint (token, owner)",
    );
    await suite.dbs.exec('full_dst', 'CREATE UNIQUE INDEX ON prepared.tokens (token)');
    const plan = await suite.stack.ferry.preflight({ source: 'full_src', target: 'full_dst', tables: [{ name: 'app.tokens', target: 'prepared.tokens' }] }, 'uk-prepared-2');
    expect(plan.tables[0].targetExisted).toBe(true);
  });
});

describe('the key a plan names', () => {
  let dbs: TestDatabases;
  let direct: DirectActivities;
  const run = <T>(fn: () => Promise<T>): Promise<T> => direct.run(fn);

  beforeAll(async () => {
    dbs = await TestDatabases.create('ukplan', ['source', 'target']);
    await dbs.exec(
      'source',
      `CREATE SCHEMA app;
       CREATE TABLE app.members (id int NOT NULL, org int NOT NULL, handle text NOT NULL, CONSTRAINT members_org_handle UNIQUE (org, handle));
       INSERT INTO app.members SELECT g, g % 20, 'h' || g FROM generate_series(1, 1000) g;
       -- A deferrable primary key is still the key (as it always was), and is built on the target.
       CREATE TABLE app.deferred (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v int);
       INSERT INTO app.deferred SELECT g, g FROM generate_series(1, 100) g;
       -- Unique in a case-insensitive collation: a coarser equality than the column's, so no key.
       CREATE COLLATION app.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
       CREATE TABLE app.people (email text NOT NULL UNIQUE, nick text NOT NULL);
       CREATE UNIQUE INDEX people_nick_ci ON app.people (nick COLLATE app.ci);
       CREATE UNIQUE INDEX people_email_ci ON app.people (email COLLATE app.ci);
       ANALYZE;`,
    );
    direct = directActivities(dbs);
  });

  afterAll(async () => {
    await direct?.close();
    await dbs?.drop();
  });

  it("builds the plan's key on the target, not a narrower unique index made since, and a deferrable primary key as it is", async () => {
    const spec = parseSpec({ source: 'src', target: 'dst', tables: ['app.members', 'app.deferred', 'app.people'] });
    const plan = await run(() => direct.activities.preflight({ migrationId: 'ukplan', spec }));
    expect(plan.tables.map((t) => t.keyColumns.map((k) => k.name))).toEqual([['org', 'handle'], ['id'], ['email']]);
    // After preflight, a narrower unique index: the key is still the plan's.
    await dbs.exec('source', 'CREATE UNIQUE INDEX members_id ON app.members (id)');
    await run(() => direct.activities.prepareTarget({ migrationId: 'ukplan', source: 'src', target: 'dst', plan, truncate: false, primaryKeyAfterLoad: true }));
    for (const table of plan.tables) await run(() => direct.activities.addPrimaryKey({ source: 'src', target: 'dst', table }));
    const onTarget = await dbs.query<{ name: string; def: string }>(
      'target',
      `SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid IN ('app.members'::regclass, 'app.deferred'::regclass) ORDER BY 1`,
    );
    expect(onTarget).toEqual([
      { name: 'deferred_pkey', def: 'CREATE UNIQUE INDEX deferred_pkey ON app.deferred USING btree (id)' },
      { name: 'members_org_handle', def: 'CREATE UNIQUE INDEX members_org_handle ON app.members USING btree (org, handle)' },
    ]);
    expect(await dbs.query('target', `SELECT contype, condeferrable FROM pg_constraint WHERE conrelid = 'app.deferred'::regclass`)).toEqual([{ contype: 'p', condeferrable: true }]);
    // The new index is built as any other; the key is not listed twice.
    const { indexes } = await run(() => direct.activities.listIndexes({ source: 'src', table: plan.tables[0] }));
    expect(indexes.map((i) => i.name)).toEqual(['members_id']);
  });

  it('keeps a unique index in a coarser collation among those the apply must evict by, though it is over the key', async () => {
    const keys = await withClient(dbs.url('source'), (db) => readUniqueKeys(db, { schema: 'app', name: 'people' }, ['email']));
    const names = keys.map((k) => k.name);
    expect(names).toEqual(['people_email_ci', 'people_nick_ci']);
  });
});
