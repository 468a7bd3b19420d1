/**
 * Tables without a key, online: logical capture with REPLICA IDENTITY FULL, on a private cluster
 * with wal_level=logical. The table is copied in one snapshot at a known WAL position, its changes
 * arrive as whole rows and are applied exactly once from a watermark on the target, and it is
 * validated whole at a position. Under writers that insert twins of existing rows, update and
 * delete one row of several equal ones, update rows whose out-of-line column stays unchanged, and
 * delete and re-insert in one transaction — before the copy's snapshot, during it and after — the
 * target ends with the source's multiset of rows, nothing repaired — a partitioned one too, rows
 * moving between its partitions. A consumer that fails between
 * the parts of a large transaction receives it whole again, and nothing is applied twice; a target
 * that lost a row fails the table at validation; a table without FULL, or under trigger capture,
 * is refused, naming the fix.
 */
import { objectInventory, rowMultiset, rowsAsText } from '../helpers/databases';
import { aroundActivities } from '../helpers/interceptors';
import { expectCleanRun, scheduledActivities } from '../helpers/repairs';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { approveUnderWriters, expectStoppedByFreeze, runWriters, Writers } from '../helpers/writers';

const SOURCE = `
  CREATE SCHEMA app;
  CREATE TABLE app.events (at timestamptz, kind text, n int, body text, detail jsonb, tags text[], price numeric, ratio float8);
  ALTER TABLE app.events ALTER body SET STORAGE EXTERNAL;
  ALTER TABLE app.events REPLICA IDENTITY FULL;
  INSERT INTO app.events
    SELECT timestamptz '2026-01-01' + g * interval '1 minute', 'k' || (g % 13), g % 500, CASE WHEN g % 100 = 0 THEN repeat(md5(g::text), 100) END,
           jsonb_build_object('g', g % 7, 'note', 'a "quoted" note'), ARRAY['t' || (g % 3), NULL], g / 7.0, g / 3.0
      FROM generate_series(1, 20000) g;
  -- Rows that are the same row twice, and rows of NULLs.
  INSERT INTO app.events SELECT * FROM app.events WHERE n % 50 = 0;
  INSERT INTO app.events (at) SELECT NULL FROM generate_series(1, 20);
  CREATE INDEX events_n ON app.events (n);
  -- Partitioned, without a key: its replica identity FULL and each partition's, published through the root.
  CREATE TABLE app.readings (day int NOT NULL, v int) PARTITION BY RANGE (day);
  CREATE TABLE app.readings_a PARTITION OF app.readings FOR VALUES FROM (0) TO (100);
  CREATE TABLE app.readings_b PARTITION OF app.readings FOR VALUES FROM (100) TO (200);
  ALTER TABLE app.readings REPLICA IDENTITY FULL;
  ALTER TABLE app.readings_a REPLICA IDENTITY FULL;
  ALTER TABLE app.readings_b REPLICA IDENTITY FULL;
  INSERT INTO app.readings SELECT g % 200, g % 17 FROM generate_series(1, 6000) g;
  CREATE TABLE app.plain (id int PRIMARY KEY, v int);
  INSERT INTO app.plain SELECT g, 0 FROM generate_series(1, 1000) g;
  -- No key and its replica identity left at DEFAULT: deletes would come without their rows.
  CREATE TABLE app.bare (v int);
  INSERT INTO app.bare VALUES (1), (1);
  ANALYZE;`;

/** Writers of app.events (and app.plain): every kind of change a table without a key can get. */
function eventWriters(url: string): Promise<Writers> {
  return runWriters(url, 3, ({ client, w, nextId }) => {
    const n = () => Math.floor(Math.random() * 500);
    const oneRow = (where: string) => `ctid = (SELECT ctid FROM app.events WHERE ${where} LIMIT 1)`;
    return [
      { kind: 'insert', run: () => client.query(`INSERT INTO app.events VALUES (now(), $1, $2, NULL, '{"by": [1, 2]}', '{a,b}', 0.1, 1e-7)`, [`w${w}`, nextId()]) },
      { kind: 'insert twin', run: () => client.query(`INSERT INTO app.events SELECT * FROM app.events WHERE n = $1 LIMIT 1`, [n()]) },
      { kind: 'update one of twins', run: () => client.query(`UPDATE app.events SET kind = kind || '!', detail = detail || '{"seen": true}' WHERE ${oneRow('n = $1')}`, [n()]) },
      // Several rows at once, their out-of-line body unchanged (it arrives as "unchanged" in the new row).
      { kind: 'update many', run: () => client.query(`UPDATE app.events SET at = at + interval '1 second' WHERE n = $1`, [n()]) },
      { kind: 'delete one of twins', run: () => client.query(`DELETE FROM app.events WHERE ${oneRow('n = $1')}`, [n()]) },
      { kind: 'update nulls', run: () => client.query(`UPDATE app.events SET kind = 'was null' WHERE ${oneRow('at IS NULL AND kind IS NULL')}`) },
      {
        kind: 'delete and reinsert',
        run: async () => {
          await client.query('BEGIN');
          const { rows } = await client.query(`DELETE FROM app.events WHERE ${oneRow('n = $1')} RETURNING at, kind, n, body, detail, tags, price, ratio`, [n()]);
          for (const r of rows) await client.query('INSERT INTO app.events VALUES ($1, $2, $3, $4, $5, $6, $7, $8)', [r.at, r.kind, r.n, r.body, r.detail, r.tags, r.price, r.ratio]);
          await client.query('COMMIT');
        },
      },
      // One row moved to the other partition (a delete there and an insert here), and several equal rows at once.
      {
        kind: 'move reading',
        run: () => {
          const day = Math.floor(Math.random() * 200);
          return client.query(`UPDATE app.readings SET day = (day + 100) % 200 WHERE day = $1 AND ctid = (SELECT ctid FROM app.readings WHERE day = $1 LIMIT 1)`, [day]);
        },
      },
      { kind: 'update readings', run: () => client.query('UPDATE app.readings SET v = v + 1 WHERE day = $1', [Math.floor(Math.random() * 200)]) },
      { kind: 'update plain', run: () => client.query('UPDATE app.plain SET v = v + 1 WHERE id = $1', [1 + Math.floor(Math.random() * 1000)]) },
    ];
  });
}
const KINDS = 10;

describe('tables without a key, online', () => {
  /** Run before each copy of app.events, and after each. */
  let beforeCopy: (() => Promise<void>) | undefined;
  let afterCopy: (() => Promise<void>) | undefined;

  const suite = stackSuite({
    name: 'keyless_online',
    databases: { source: SOURCE, target: '' },
    connections: { src: 'source', dst: 'target' },
    logical: true,
    perTest: 'databases',
    workerOptions: () => ({
      interceptors: aroundActivities({
        copyChunk: {
          before: async (input) => {
            if ((input as { table: { source: { name: string } } }).table.source.name === 'events') await beforeCopy?.();
          },
          after: async (input) => {
            if ((input as { table: { source: { name: string } } }).table.source.name === 'events') await afterCopy?.();
          },
        },
      }),
    }),
  });

  beforeEach(() => {
    beforeCopy = undefined;
    afterCopy = undefined;
  });

  const spec = (extra: Record<string, unknown> = {}) => ({
    source: 'src',
    target: 'dst',
    mode: 'online',
    capture: 'logical',
    tables: ['app.events', 'app.plain', 'app.readings'],
    cutover: { approval: 'manual', approvalTimeout: '5m' },
    ...extra,
  });

  /** Approved: SUCCEEDED, nothing repaired, app.events the same multiset of rows on both sides. */
  async function approvedToTheEnd(id: string): Promise<void> {
    await suite.stack.ferry.approve(id);
    const result = await resultWithin(suite.stack.ferry, id, 90_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(suite.stack.ferry, result);
    expect(await rowMultiset(suite.dbs, 'target', 'app.events')).toEqual(await rowMultiset(suite.dbs, 'source', 'app.events'));
  }

  /** The change log of app.events (the spec's first table). */
  const eventsLog = async () =>
    (await suite.dbs.query<{ t: string }>('source', `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%\\_0'`))[0].t;

  it('moves it under writers — before its snapshot, during its copy and after — to the same multiset of rows, each change applied once, nothing repaired', async () => {
    const writers = await eventWriters(suite.dbs.url('source'));
    // Changes committed between the slot's creation and the copy's snapshot are in the copy:
    // applied again, they would be rows twice.
    beforeCopy = async () => {
      const before = writers.stats.operations;
      await eventually(async () => writers.stats.operations >= before + 50, 30_000);
    };
    const plan = await suite.stack.ferry.preflight(spec(), 'keyless-online-plan');
    const { id } = await suite.stack.ferry.start(spec(), { id: 'keyless-online' });
    const result = await approveUnderWriters(suite.stack.ferry, id, writers, KINDS, 120_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expectStoppedByFreeze(writers.stats);
    await expectCleanRun(suite.stack.ferry, result);
    expect(await rowMultiset(suite.dbs, 'target', 'app.events')).toEqual(await rowMultiset(suite.dbs, 'source', 'app.events'));
    expect(await rowMultiset(suite.dbs, 'target', 'app.readings')).toEqual(await rowMultiset(suite.dbs, 'source', 'app.readings'));
    expect(await rowsAsText(suite.dbs, 'target', 'app.plain', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'app.plain', 'id'));
    // Said in the plan; copied in one chunk, validated at a position, its index built.
    const events = plan.tables.find((t) => t.source.name === 'events');
    expect(events?.notes?.[0]).toMatch(/^no key: copied whole in one snapshot at a known WAL position/);
    expect(events?.chunks).toEqual([{ index: 0, lower: null, upper: null }]);
    const activities = await scheduledActivities(suite.stack.ferry.client, `${id}/table-0`);
    expect(activities.filter((a) => a === 'validateAtPosition')).toEqual(['validateAtPosition']);
    expect((await scheduledActivities(suite.stack.ferry.client, `${id}/table-2`)).filter((a) => a === 'validateAtPosition')).toEqual(['validateAtPosition']);
    expect(activities).not.toContain('validateChunk');
    expect(await suite.dbs.query('target', `SELECT indexdef FROM pg_indexes WHERE tablename = 'events'`)).toEqual([{ indexdef: 'CREATE INDEX events_n ON app.events USING btree (n)' }]);
  });

  it('applies nothing twice when the consumer fails between the parts of a large transaction and receives it whole again', async () => {
    const { id } = await suite.stack.ferry.start(spec(), { id: 'keyless-large-transaction' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    // Paused, the sync leaves the log as the consumer writes it (the consumer streams on).
    await suite.stack.ferry.pause(id);
    await eventually(async () => (await suite.stack.ferry.status(id)).paused);
    const log = await eventsLog();
    const [{ rows }] = await suite.dbs.query<{ rows: number }>('source', `SELECT count(*)::int AS rows FROM ${log}`);
    // The log's write after the transaction's first part fails, once: the part is in the log, its
    // transaction's position not confirmed, so the retry receives the transaction from its start.
    await suite.dbs.exec(
      'source',
      `CREATE SEQUENCE public.fail_once;
       CREATE FUNCTION public.fail_after_first_part() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF (SELECT count(*) FROM ${log}) > ${rows + 5_000} AND nextval('public.fail_once') = 1 THEN RAISE EXCEPTION 'the log refuses a part, once'; END IF;
         RETURN NULL;
       END $$;
       CREATE TRIGGER fail_after_first_part AFTER INSERT ON ${log} FOR EACH STATEMENT EXECUTE FUNCTION public.fail_after_first_part();`,
    );
    // One transaction of many thousand row changes (each update takes a row away and adds one), written in parts of 5,000.
    const [{ changed }] = await suite.dbs.query<{ changed: number }>('source', `SELECT count(*)::int AS changed FROM app.events WHERE n < 300`);
    await suite.dbs.exec('source', `UPDATE app.events SET kind = coalesce(kind, '') || '+' WHERE n < 300`);
    await eventually(async () => (await suite.dbs.query('source', `SELECT 1 FROM public.fail_once WHERE is_called`)).length === 1, 60_000);
    // The retry wrote the transaction whole: each of its row changes in the log once.
    const logged = await eventually(async () => {
      const counted = await suite.dbs.query<{ changes: number; distinct: number }>(
        'source',
        `SELECT count(*)::int AS changes, count(DISTINCT (lsn, seq))::int AS distinct FROM ${log} WHERE lsn = (SELECT max(lsn) FROM ${log})`,
      );
      return counted[0].changes >= 2 * changed ? counted[0] : undefined;
    }, 60_000);
    expect(logged).toEqual({ changes: 2 * changed, distinct: 2 * changed });
    await suite.stack.ferry.resume(id);
    await eventually(async () => {
      const [source, target] = [await rowMultiset(suite.dbs, 'source', 'app.events'), await rowMultiset(suite.dbs, 'target', 'app.events')];
      return source.digest === target.digest;
    }, 60_000);
    await approvedToTheEnd(id);
  });

  it('applies nothing twice when the sync fails after the target committed a round and before the log let go of it', async () => {
    const { id } = await suite.stack.ferry.start(spec(), { id: 'keyless-retire-fails' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    const log = await eventsLog();
    // The first row the sync deletes from the log, once: the round is on the target with its
    // watermark, its changes still in the log.
    await suite.dbs.exec(
      'source',
      `CREATE SEQUENCE public.fail_once;
       CREATE FUNCTION public.fail_retire() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF nextval('public.fail_once') = 1 THEN RAISE EXCEPTION 'the log keeps its rows, once'; END IF;
         RETURN OLD;
       END $$;
       CREATE TRIGGER fail_retire BEFORE DELETE ON ${log} FOR EACH ROW EXECUTE FUNCTION public.fail_retire();`,
    );
    await suite.dbs.exec('source', `INSERT INTO app.events SELECT at, kind, n, body FROM app.events WHERE n = 7; DELETE FROM app.events WHERE n = 8;`);
    await eventually(async () => (await suite.dbs.query('source', `SELECT 1 FROM public.fail_once WHERE is_called`)).length === 1, 60_000);
    await eventually(async () => (await rowMultiset(suite.dbs, 'target', 'app.events')).digest === (await rowMultiset(suite.dbs, 'source', 'app.events')).digest, 60_000);
    await approvedToTheEnd(id);
  });

  it('fails the table at validation when the target lost a row behind the copy, and rolls the target back', async () => {
    const before = await objectInventory(suite.dbs, 'target');
    // After the copy committed and before the workflow hears of it: one row gone from the target.
    afterCopy = async () => {
      await suite.dbs.exec('target', `DELETE FROM app.events WHERE ctid = (SELECT ctid FROM app.events WHERE n = 7 LIMIT 1)`);
    };
    const { id } = await suite.stack.ferry.start(spec({ onFailure: 'rollback' }), { id: 'keyless-lost-row' });
    const result = await resultWithin(suite.stack.ferry, id, 120_000);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('ConsistencyBreach');
    expect(result.error?.message).toMatch(/app\.events: source and target differ at position [0-9A-F]+\/[0-9A-F]+ \(source 20\d+ rows, target 20\d+\)/);
    expect(result.events.some((e) => e.type === 'ConsistencyBreach' && e.table === 'app.events')).toBe(true);
    await eventually(async () => JSON.stringify(await objectInventory(suite.dbs, 'target')) === JSON.stringify(before), 30_000);
  });

  it('refuses one whose replica identity is not FULL, or under trigger capture, naming the fix, and changes nothing', async () => {
    const before = { source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') };
    await expect(suite.stack.ferry.start(spec({ tables: ['app.bare'] }), { id: 'keyless-bare' })).rejects.toThrow(
      'tables[0]: table app.bare has no primary key and no unique index over NOT NULL columns: online, such a table moves only by logical capture of whole rows ' +
        '(capture: logical or auto, and REPLICA IDENTITY FULL), and logical capture is not possible: app.bare has no key, so its changes must carry whole rows: ' +
        'ALTER TABLE app.bare REPLICA IDENTITY FULL; or add a key',
    );
    await expect(suite.stack.ferry.start(spec({ capture: 'trigger', tables: ['app.events'] }), { id: 'keyless-trigger' })).rejects.toThrow(
      'tables[0]: table app.events has no primary key and no unique index over NOT NULL columns: online, such a table moves only by logical capture of whole rows ' +
        '(capture: logical or auto, and REPLICA IDENTITY FULL), and capture: trigger logs keys; or add a key',
    );
    expect({ source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') }).toEqual(before);
  });
});
