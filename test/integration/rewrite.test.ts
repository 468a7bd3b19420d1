/**
 * The rewrite step on a real PostgreSQL under pgbench's writes: pgbench_accounts.abalance int →
 * bigint and filler dropped through a shadow copy, with the worker copying it SIGKILLed once and
 * the worker applying its change log once more; a
 * view and a foreign key that reference the table follow it to the new table; the writers never
 * fail and wait only for the swap. A rewrite cancelled while it awaits approval leaves the table,
 * its data and the database's objects as they were.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { runningActivities } from '../helpers/chaos';
import { awaitRetry, HeldLock, Killed } from '../helpers/kills';
import { pgbenchSeed, PGBENCH } from '../helpers/pgbench';
import { eventually, RunningProcessWorker } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const ROWS = 200_000;
const REWRITE = {
  table: 'public.pgbench_accounts',
  alter: ['ALTER COLUMN abalance TYPE bigint', 'DROP COLUMN filler'],
  columns: { abalance: 'abalance::bigint' },
};

/**
 * pgbench's TPC-B until stopped, reporting every second (SIGINT ends pgbench without its final
 * report): resolves with its output, whose progress lines count the failed transactions.
 */
function startTpcb(url: string): { stop: () => Promise<{ code: number | null; out: string }> } {
  const child = spawn(PGBENCH, ['-n', '-c', '2', '-j', '1', '-T', '600', '-P', '1', '-b', 'tpcb-like', url], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const done = new Promise<{ code: number | null; out: string }>((r) => child.on('close', (code) => r({ code, out }))); // its output read to the end
  return {
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      return done;
    },
  };
}

/** A writer of its own that times each single-row update: the longest is the writers' stall. */
function startProbe(url: string): { stop: () => Promise<{ count: number; maxMs: number; errors: string[] }> } {
  let running = true;
  const stats = { count: 0, maxMs: 0, errors: [] as string[] };
  const loop = (async () => {
    const c = new Client({ connectionString: url, application_name: 'latency-probe' });
    await c.connect();
    while (running) {
      const t = Date.now();
      try {
        await c.query('UPDATE public.pgbench_accounts SET abalance = abalance + 0 WHERE aid = $1', [1 + Math.floor(Math.random() * ROWS)]);
      } catch (err) {
        stats.errors.push((err as Error).message);
      }
      stats.maxMs = Math.max(stats.maxMs, Date.now() - t);
      stats.count += 1;
      await new Promise((r) => setTimeout(r, 20));
    }
    await c.end();
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return stats;
    },
  };
}

describe('rewrite steps: a table rebuilt by shadow copy and swapped under load', () => {
  let workers: RunningProcessWorker[];

  const suite = stackSuite({
    name: 'rewrite',
    databases: { app: '' },
    workers: 0,
    seed: pgbenchSeed(
      'app',
      2,
      `CREATE VIEW public.account_balances AS SELECT aid, bid, abalance FROM public.pgbench_accounts;
       COMMENT ON VIEW public.account_balances IS 'balances';
       GRANT SELECT ON public.account_balances TO PUBLIC;
       CREATE TABLE public.account_notes (id int PRIMARY KEY, aid int NOT NULL REFERENCES public.pgbench_accounts (aid));
       INSERT INTO public.account_notes SELECT g, g * 7 FROM generate_series(1, 100) g;
       COMMENT ON TABLE public.pgbench_accounts IS 'accounts';
       GRANT SELECT ON public.pgbench_accounts TO PUBLIC;
       ANALYZE public.pgbench_accounts;`,
    ),
    ready: async () => {
      workers = [await suite.stack.startWorkerProcessReady('w1'), await suite.stack.startWorkerProcessReady('w2')];
    },
  });

  /** The table's shape, its neighbours and Ferry's objects: what a cancelled rewrite must leave as it was. */
  async function inventory(): Promise<string[]> {
    const rows = await suite.dbs.query<{ d: string }>(
      'app',
      `SELECT 'column ' || attname || ' ' || format_type(atttypid, atttypmod) AS d FROM pg_attribute
        WHERE attrelid = 'public.pgbench_accounts'::regclass AND attnum > 0 AND NOT attisdropped
       UNION ALL SELECT 'relation ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
       UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal
       UNION ALL SELECT 'event trigger ' || evtname FROM pg_event_trigger
       UNION ALL SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname LIKE '\\_ferry%'
       UNION ALL SELECT 'constraint ' || conname || ' on ' || conrelid::regclass::text || ' -> ' || coalesce(confrelid::regclass::text, '') FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace
       ORDER BY 1`,
    );
    return rows.map((r) => r.d);
  }

  async function checksum(): Promise<string> {
    const [r] = await suite.dbs.query<{ md5: string }>('app', `SELECT md5(string_agg(a::text, ',' ORDER BY aid)) AS md5 FROM public.pgbench_accounts a`);
    return r.md5;
  }

  it('refuses with exit 2, naming each object, the rewrites it cannot carry, and changes nothing', async () => {
    await suite.dbs.exec(
      'app',
      `CREATE SCHEMA odd;
       CREATE TABLE odd.no_key (a int, b text);
       CREATE TABLE odd.with_trigger (id int PRIMARY KEY, v int);
       CREATE FUNCTION odd.touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
       CREATE TRIGGER touch BEFORE UPDATE ON odd.with_trigger FOR EACH ROW EXECUTE FUNCTION odd.touch();
       CREATE TABLE odd.parted (id int PRIMARY KEY) PARTITION BY RANGE (id);
       CREATE TABLE odd.summarised (id int PRIMARY KEY, v int);
       CREATE MATERIALIZED VIEW odd.summary AS SELECT sum(v) AS v FROM odd.summarised;
       CREATE TABLE odd.tree (id int PRIMARY KEY, parent int REFERENCES odd.tree (id));
       CREATE VIEW odd.tree_view AS SELECT id, parent FROM odd.tree;
       CREATE TABLE odd.plain (id int PRIMARY KEY, v int);`,
    );
    const before = await inventory();
    const file = join(tmpdir(), `ferry-rewrite-refused-${process.pid}.json`);
    const rewrite = (table: string, extra: Record<string, unknown> = {}) => ({ rewrite: { table, alter: ['ALTER COLUMN id TYPE bigint'], ...extra } });
    writeFileSync(
      file,
      JSON.stringify({
        kind: 'change',
        database: 'app',
        steps: [
          { rewrite: { table: 'odd.no_key', alter: ['ALTER COLUMN a TYPE bigint'] } },
          rewrite('odd.with_trigger'),
          rewrite('odd.parted'),
          rewrite('odd.summarised'),
          rewrite('odd.tree', { alter: ['DROP COLUMN parent'] }),
          rewrite('odd.plain', { alter: ['ALTER COLUMN nope TYPE bigint'], columns: { gone: '1' } }),
        ],
      }),
    );
    const out = await suite.stack.runCli(['start', file]);
    expect(out.code).toBe(2);
    for (const says of [
      /steps\[0\]\.rewrite\.table: odd\.no_key has no primary key/,
      /steps\[1\]\.rewrite\.table: trigger touch on odd\.with_trigger/,
      /steps\[2\]\.rewrite\.table: odd\.parted is partitioned/,
      /steps\[3\]\.rewrite\.table: materialized view odd\.summary depends on odd\.summarised/,
      /steps\[4\]\.rewrite\.table: foreign key tree_parent_fkey of odd\.tree references the table itself/,
      /steps\[5\]\.rewrite\.alter\[0\]: column "nope" of relation "plain_ferry_new_\w+" does not exist/,
      /steps\[5\]\.rewrite\.columns\.gone: the new table has no such column/,
    ]) {
      expect(out.stderr).toMatch(says);
    }
    expect(await inventory()).toEqual(before);
    const revert = await suite.stack.runCli(['revert', 'whatever']);
    expect({ code: revert.code, stderr: revert.stderr }).toEqual({ code: 2, stderr: expect.stringMatching(/there is no change plan whatever/) });
    await suite.dbs.exec('app', 'DROP SCHEMA odd CASCADE');
  });

  it('carries identity, an owned sequence, CHECK and NOT NULL, defaults, index names, storage parameters and grants, and transforms every row through the expressions', async () => {
    await suite.dbs.exec(
      'app',
      `CREATE SCHEMA shop;
       CREATE SEQUENCE shop.ref_seq;
       CREATE TABLE shop.orders (
         id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         ref int NOT NULL DEFAULT nextval('shop.ref_seq'),
         total int NOT NULL CHECK (total >= 0),
         code text UNIQUE,
         note text DEFAULT 'none'
       ) WITH (fillfactor = 80);
       ALTER SEQUENCE shop.ref_seq OWNED BY shop.orders.ref;
       CREATE INDEX orders_total_idx ON shop.orders (total) WHERE total > 10;
       COMMENT ON COLUMN shop.orders.total IS 'cents';
       GRANT INSERT, SELECT ON shop.orders TO PUBLIC;
       INSERT INTO shop.orders (total, code) SELECT g % 500, 'c' || g FROM generate_series(1, 5000) g;
       CREATE TABLE shop.orders_frozen AS SELECT * FROM shop.orders;`,
    );
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'orders-carried',
      database: 'app',
      steps: [{ rewrite: { table: 'shop.orders', alter: ['ALTER COLUMN total TYPE bigint', 'DROP COLUMN note'], columns: { total: 'total::bigint * 100', code: 'upper(code)' } } }],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.error).toBeNull();
    // Every row, through the expressions, in both directions.
    const [diff] = await suite.dbs.query<{ missing: string; extra: string }>(
      'app',
      `SELECT (SELECT count(*) FROM (SELECT id, ref, total::bigint * 100, upper(code) FROM shop.orders_frozen EXCEPT SELECT id, ref, total, code FROM shop.orders) m) AS missing,
              (SELECT count(*) FROM (SELECT id, ref, total, code FROM shop.orders EXCEPT SELECT id, ref, total::bigint * 100, upper(code) FROM shop.orders_frozen) e) AS extra`,
    );
    expect(diff).toEqual({ missing: '0', extra: '0' });
    const [carried] = await suite.dbs.query(
      'app',
      `SELECT (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'shop.orders'::regclass) AS indexes,
              (SELECT array_agg(conname::text || ' ' || contype::text ORDER BY conname) FROM pg_constraint WHERE conrelid = 'shop.orders'::regclass) AS constraints,
              (SELECT reloptions::text FROM pg_class WHERE oid = 'shop.orders'::regclass) AS options,
              (SELECT d.refobjid = 'shop.orders'::regclass FROM pg_depend d WHERE d.objid = 'shop.ref_seq'::regclass AND d.deptype = 'a') AS seq_owned_by_new,
              col_description('shop.orders'::regclass, 3) AS total_comment,
              has_table_privilege('public', 'shop.orders', 'INSERT') AS grant_insert,
              (SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'shop.orders'::regclass AND adnum = 2) AS ref_default,
              pg_get_serial_sequence('shop.orders', 'id') AS identity_sequence,
              (SELECT reltuples FROM pg_class WHERE oid = 'shop.orders'::regclass) AS analysed_rows`,
    );
    expect(carried).toEqual({
      indexes: ['orders_code_key', 'orders_pkey', 'orders_total_idx'],
      constraints: ['orders_code_key u', 'orders_pkey p', 'orders_total_check c'],
      options: '{fillfactor=80}',
      seq_owned_by_new: true,
      total_comment: 'cents',
      grant_insert: true,
      ref_default: "nextval('shop.ref_seq'::regclass)",
      identity_sequence: 'shop.orders_id_seq',
      analysed_rows: 5000,
    });
    // The identity goes on after the copied ids, the CHECK still holds.
    const [next] = await suite.dbs.query<{ id: number }>('app', 'INSERT INTO shop.orders (total, code) VALUES (1, $1) RETURNING id', ['new']);
    expect(next.id).toBe(5001);
    await expect(suite.dbs.exec('app', "INSERT INTO shop.orders (total, code) VALUES (-1, 'neg')")).rejects.toThrow(/orders_total_check/);
    await suite.dbs.exec('app', 'DROP SCHEMA shop CASCADE');
  });

  it('a rewrite cancelled while it awaits approval leaves the table, its data and the database as they were', async () => {
    const before = await inventory();
    const data = await checksum();
    const { id } = await suite.stack.ferry.startChange({ kind: 'change', id: 'rewrite-cancelled', database: 'app', steps: [{ rewrite: { ...REWRITE, approval: 'manual' } }] });
    await eventually(async () => (await suite.stack.ferry.changeStatus(id)).waiting?.includes('awaiting approval'), 90_000);
    // The shadow exists now, with the new shape.
    const [shadow] = await suite.dbs.query<{ type: string }>(
      'app',
      `SELECT format_type(a.atttypid, a.atttypmod) AS type FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
        WHERE c.relname LIKE 'pgbench_accounts\\_ferry\\_new\\_%' AND a.attname = 'abalance'`,
    );
    expect(shadow).toEqual({ type: 'bigint' });
    await suite.stack.ferry.cancel(id, 'changed my mind');
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.state).toBe('CANCELLED');
    expect(result.steps[0].state).toBe('FAILED');
    expect(result.warnings).toEqual([]);
    expect(await inventory()).toEqual(before);
    expect(await checksum()).toBe(data);
  });

  it('ferry cleanup after a rewrite was terminated before its swap removes its shadow, capture and bookkeeping: the database as it was', async () => {
    const before = await inventory();
    const data = await checksum();
    const { id } = await suite.stack.ferry.startChange({ kind: 'change', id: 'rewrite-terminated', database: 'app', steps: [{ rewrite: { ...REWRITE, approval: 'manual' } }] });
    await eventually(async () => (await suite.stack.ferry.changeStatus(id)).waiting?.includes('awaiting approval'), 90_000);
    // Terminated: no compensation runs; the shadow and capture stay behind.
    await suite.stack.client.workflow.getHandle(id).terminate('test: an operator terminated it');
    const left = await inventory();
    expect(left.filter((o) => !before.includes(o)).some((o) => /pgbench_accounts_ferry_new_/.test(o))).toBe(true);
    expect(left.filter((o) => !before.includes(o)).some((o) => /^trigger ferry_capture_/.test(o))).toBe(true);

    const out = await suite.stack.runCli(['cleanup', id]);
    expect({ code: out.code, stderr: out.stderr }).toEqual({ code: 0, stderr: '' });
    expect(out.stdout).toMatch(/rewrite-terminated: capture of its rewrites removed; dropped public\.pgbench_accounts_ferry_new_\w+/);
    expect(await inventory()).toEqual(before);
    expect(await checksum()).toBe(data);
    // A cleanup of a plan that is still running is refused.
    const running = await suite.stack.ferry.startChange({ kind: 'change', id: 'rewrite-running', database: 'app', steps: [{ rewrite: { ...REWRITE, approval: 'manual' } }] });
    expect((await suite.stack.runCli(['cleanup', running.id])).code).toBe(2);
    await suite.stack.ferry.cancel(running.id, 'test over');
    expect((await suite.stack.ferry.changeResult(running.id)).state).toBe('CANCELLED');
  });

  it('rewrites abalance to bigint and drops filler under pgbench across a SIGKILLed copy and a SIGKILLed sync: every write kept, view and foreign key moved, writers never failed', async () => {
    const url = suite.dbs.url('app');
    const load = startTpcb(url);
    const probe = startProbe(url);
    let report = { code: null as number | null, out: '' };
    let stall = { count: 0, maxMs: 0, errors: [] as string[] };
    let oldTable = '';
    try {
      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'accounts-bigint',
        database: 'app',
        throttle: { rowsPerSecond: 16_000 },
        steps: [{ rewrite: { ...REWRITE, approval: 'auto', keepOld: '15s' } }],
      });
      // Killed once ferry status shows a quarter of the rows copied (read from the copy's own
      // heartbeat, which also carries the resume point), while the copy runs.
      const target = await eventually(async () => {
        const running = (await runningActivities(suite.stack.ferry, [id])).find((a) => a.activity === 'copyRewrite' && a.heartbeating);
        if (!running) return undefined;
        const copying = (await suite.stack.ferry.changeStatus(id)).steps[0];
        return copying.note === 'copying' && copying.progress?.unit === 'rows' && copying.progress.done >= ROWS / 4 && copying.progress.done < ROWS ? running : undefined;
      }, 90_000, 100);
      const victim = workers.find((w) => w.identity === target.worker)!;
      victim.process.kill('SIGKILL');
      await victim.exited;
      workers = [...workers.filter((w) => w !== victim), await suite.stack.startWorkerProcessReady(`${victim.identity}-again`)];
      const killed: Killed = { ...target, at: Date.now() };
      expect(await awaitRetry(suite.stack.ferry, killed)).toMatchObject({ attempt: killed.attempt + 1, endedBy: 'heartbeat timeout' });

      // Killed again while it applies the change log to the shadow: once the copy is over, a
      // SHARE lock of the test's on the shadow keeps the next sync round at its first batch
      // (under its 5 s lock_timeout) until the kill; released right after it, before the retry.
      const shadow = await eventually(async () => {
        const { note } = (await suite.stack.ferry.changeStatus(id)).steps[0];
        if (!note || note === 'copying' || note.startsWith('building')) return undefined;
        const rows = await suite.dbs.query<{ name: string }>('app', `SELECT relname AS name FROM pg_class WHERE relname LIKE 'pgbench_accounts\\_ferry\\_new\\_%' AND relkind = 'r'`);
        return rows[0]?.name;
      }, 120_000, 100);
      const hold = await HeldLock.take(url, 'shadow', [`LOCK TABLE public.${shadow} IN SHARE MODE`]);
      try {
        const syncing = await eventually(async () => (await runningActivities(suite.stack.ferry, [id])).find((a) => a.activity === 'syncRewrite' && a.heartbeating), 60_000, 50);
        const second = workers.find((w) => w.identity === syncing.worker)!;
        second.process.kill('SIGKILL');
        await second.exited;
        await hold.release();
        workers = [...workers.filter((w) => w !== second), await suite.stack.startWorkerProcessReady(`${second.identity}-again`)];
        const killedSync: Killed = { ...syncing, at: Date.now() };
        expect(await awaitRetry(suite.stack.ferry, killedSync)).toMatchObject({ attempt: killedSync.attempt + 1, endedBy: 'heartbeat timeout' });
      } finally {
        await hold.release();
      }

      const result = await suite.stack.ferry.changeResult(id);
      expect(result.error).toBeNull();
      expect(result.state).toBe('SUCCEEDED');
      const swapped = result.events.find((e) => e.type === 'RewriteSwapped');
      expect(swapped?.detail).toMatchObject({ views: ['public.account_balances'], foreignKeys: 1 });
      console.log(`rewrite swap held writers ${String(swapped?.detail?.lockedMs)} ms, drained ${String(swapped?.detail?.drained)} rows`);
      oldTable = (await suite.dbs.query<{ name: string }>('app', `SELECT relname AS name FROM pg_class WHERE relname LIKE 'pgbench_accounts\\_ferry\\_old\\_%'`))[0].name;
    } finally {
      report = await load.stop();
      stall = await probe.stop();
    }
    const progress = report.out.split('\n').filter((l) => l.startsWith('progress:'));
    const tps = progress.map((l) => Number(/([\d.]+) tps/.exec(l)?.[1] ?? 0));
    console.log(`pgbench during the rewrite: ${progress.length} s, ${Math.min(...tps)}–${Math.max(...tps)} tps; longest probe update: ${stall.maxMs} ms over ${stall.count}`);

    // Writers: no pgbench client aborted and no transaction failed, no probe update failed, none waited long.
    expect(report.out).not.toMatch(/aborted|ERROR/);
    expect(progress.length).toBeGreaterThan(10);
    const failed = progress.map((l) => Number(/(\d+) failed/.exec(l)?.[1] ?? 'NaN'));
    expect(failed.every((n) => n === 0)).toBe(true);
    expect(stall.errors).toEqual([]);
    expect(stall.count).toBeGreaterThan(100);
    expect(stall.maxMs).toBeLessThan(3_000);

    // The new shape.
    const columns = await suite.dbs.query<{ name: string; type: string }>(
      'app',
      `SELECT attname AS name, format_type(atttypid, atttypmod) AS type FROM pg_attribute
        WHERE attrelid = 'public.pgbench_accounts'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    );
    expect(columns).toEqual([
      { name: 'aid', type: 'integer' },
      { name: 'bid', type: 'integer' },
      { name: 'abalance', type: 'bigint' },
    ]);
    // Every write kept: pgbench's history is a ledger of every balance change since init (all
    // balances began at 0), across the copy, the kill, the sync and the swap.
    const [ledger] = await suite.dbs.query<{ rows: string; wrong: string; deltas: string }>(
      'app',
      `SELECT count(*) AS rows, count(*) FILTER (WHERE a.abalance <> coalesce(h.total, 0)) AS wrong, (SELECT count(*) FROM public.pgbench_history) AS deltas
         FROM public.pgbench_accounts a LEFT JOIN (SELECT aid, sum(delta) AS total FROM public.pgbench_history GROUP BY aid) h USING (aid)`,
    );
    expect({ rows: Number(ledger.rows), wrong: Number(ledger.wrong) }).toEqual({ rows: ROWS, wrong: 0 });
    expect(Number(ledger.deltas)).toBeGreaterThan(500);
    // The old table holds the rows as they were at the swap: same keys and branches.
    const [old] = await suite.dbs.query<{ differ: string }>(
      'app',
      `SELECT count(*) AS differ FROM public.pgbench_accounts n FULL JOIN public.${oldTable} o USING (aid) WHERE n.bid IS DISTINCT FROM o.bid`,
    );
    expect(Number(old.differ)).toBe(0);

    // The view, its grant and comment, and the foreign key point at the new table.
    const [catalog] = await suite.dbs.query<{ view_on_new: boolean; view_type: string; comment: string; grant: boolean; fk_on_new: boolean; fk_valid: boolean; pkey: string; table_comment: string }>(
      'app',
      `SELECT EXISTS (SELECT 1 FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                       WHERE r.ev_class = 'public.account_balances'::regclass AND d.refobjid = 'public.pgbench_accounts'::regclass) AS view_on_new,
              (SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'public.account_balances'::regclass AND attname = 'abalance') AS view_type,
              obj_description('public.account_balances'::regclass, 'pg_class') AS comment,
              has_table_privilege('public', 'public.account_balances', 'SELECT') AS grant,
              (SELECT confrelid = 'public.pgbench_accounts'::regclass FROM pg_constraint WHERE conrelid = 'public.account_notes'::regclass AND contype = 'f') AS fk_on_new,
              (SELECT convalidated FROM pg_constraint WHERE conrelid = 'public.account_notes'::regclass AND contype = 'f') AS fk_valid,
              (SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'public.pgbench_accounts'::regclass AND i.indisprimary) AS pkey,
              obj_description('public.pgbench_accounts'::regclass, 'pg_class') AS table_comment`,
    );
    expect(catalog).toEqual({
      view_on_new: true,
      view_type: 'bigint',
      comment: 'balances',
      grant: true,
      fk_on_new: true,
      fk_valid: true,
      pkey: 'pgbench_accounts_pkey',
      table_comment: 'accounts',
    });
    const [sums] = await suite.dbs.query<{ view: string; table: string }>(
      'app',
      'SELECT (SELECT sum(abalance) FROM public.account_balances) AS view, (SELECT sum(abalance) FROM public.pgbench_accounts) AS table',
    );
    expect(sums.view).toBe(sums.table);
    await expect(suite.dbs.exec('app', 'INSERT INTO public.account_notes VALUES (1000, 999999999)')).rejects.toThrow(/foreign key/);
    // The rewrite's capture is gone; the new table's (for a revert) stays until keepOld has
    // passed, then it goes and the old table is dropped.
    const triggers = async () => (await suite.dbs.query<{ on: string }>('app', `SELECT tgrelid::regclass::text AS on FROM pg_trigger WHERE tgname LIKE 'ferry%'`)).map((r) => r.on);
    expect(await triggers()).toEqual(['pgbench_accounts', 'pgbench_accounts']);
    await eventually(async () => (await suite.dbs.query('app', `SELECT 1 FROM pg_class WHERE relname = $1`, [oldTable])).length === 0, 60_000, 500);
    expect(await triggers()).toEqual([]);
  });

  it('ferry revert within keepOld swaps back to the old shape with every write made since the swap, under writes', async () => {
    await suite.dbs.exec(
      'app',
      `CREATE TABLE public.ledger (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, amount int NOT NULL, note text);
       INSERT INTO public.ledger (amount, note) SELECT g % 1000, 'n' || g FROM generate_series(1, 20000) g;
       CREATE VIEW public.ledger_view AS SELECT id, amount FROM public.ledger;
       CREATE TABLE public.ledger_refs (id int PRIMARY KEY, ledger_id bigint NOT NULL REFERENCES public.ledger (id));
       INSERT INTO public.ledger_refs SELECT g, g * 3 FROM generate_series(1, 50) g;`,
    );
    // A writer that inserts, updates and deletes throughout (before, across and after both swaps)
    // and keeps its own account of what each key must hold; waits on a swap's lock are fine.
    const expected = new Map<number, number>();
    for (let id = 1; id <= 20_000; id += 1) expected.set(id, id % 1000);
    const writer = new Client({ connectionString: suite.dbs.url('app') });
    await writer.connect();
    let writing = true;
    const errors: string[] = [];
    let writes = 0;
    const loop = (async () => {
      for (let i = 0; writing; i += 1) {
        try {
          const key = 1 + ((i * 7919) % 20_000);
          if (i % 3 === 0) {
            const { rows } = await writer.query('INSERT INTO public.ledger (amount) VALUES ($1) RETURNING id', [i % 500]);
            expected.set(Number(rows[0].id), i % 500);
          } else if (i % 3 === 1) {
            const { rows } = await writer.query('UPDATE public.ledger SET amount = amount + 1 WHERE id = $1 RETURNING amount', [key]);
            if (rows.length) expected.set(key, Number(rows[0].amount));
          } else if (key > 200 && expected.has(key)) {
            await writer.query('DELETE FROM public.ledger WHERE id = $1', [key]);
            expected.delete(key);
          }
          writes += 1;
        } catch (err) {
          errors.push((err as Error).message);
        }
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    try {
      const { id } = await suite.stack.ferry.startChange({
        kind: 'change',
        id: 'ledger-bigint',
        database: 'app',
        steps: [{ rewrite: { table: 'public.ledger', alter: ['ALTER COLUMN amount TYPE bigint', 'DROP COLUMN note'], approval: 'auto', keepOld: '10m' } }],
      });
      expect((await suite.stack.ferry.changeResult(id)).state).toBe('SUCCEEDED');
      const typeOf = async () =>
        (await suite.dbs.query<{ type: string }>('app', `SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = 'public.ledger'::regclass AND attname = 'amount'`))[0]
          ?.type;
      expect(await typeOf()).toBe('bigint');
      // Writes land on the new table for a while.
      const after = writes;
      await eventually(async () => writes > after + 300, 60_000, 100);

      const out = await suite.stack.runCli(['revert', id, '--reason', 'bigint broke the reports']);
      expect({ code: out.code, stderr: out.stderr }).toEqual({ code: 0, stderr: '' });
      expect(out.stdout).toMatch(/ledger-bigint step 1: reverted — \d+ logged writes carried back, \d+ rows checked, writers held \d+ ms/);
      // A second revert has nothing to do.
      expect((await suite.stack.runCli(['revert', id])).code).toBe(2);
      const more = writes;
      await eventually(async () => writes > more + 100, 60_000, 100);
    } finally {
      writing = false;
      await loop;
      await writer.end();
    }
    expect(errors).toEqual([]);

    // The old shape again, with every write: the writer's account of each key, row for row.
    const columns = await suite.dbs.query<{ name: string; type: string }>(
      'app',
      `SELECT attname AS name, format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = 'public.ledger'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    );
    expect(columns).toEqual([
      { name: 'id', type: 'bigint' },
      { name: 'amount', type: 'integer' },
      { name: 'note', type: 'text' },
    ]);
    const rows = await suite.dbs.query<{ id: string; amount: number; note: string | null }>('app', 'SELECT id, amount, note FROM public.ledger ORDER BY id');
    const wrong = rows.filter((r) => expected.get(Number(r.id)) !== r.amount).slice(0, 5);
    expect({ rows: rows.length, wrong }).toEqual({ rows: expected.size, wrong: [] });
    // The rows that were there before the rewrite kept their note (the new table had none).
    const notes = rows.filter((r) => Number(r.id) <= 20_000);
    expect(notes.filter((r) => r.note !== `n${r.id}`).length).toBe(0);
    // The view and the foreign key are on the old table again, the identity goes on, no capture is left on it.
    const [catalog] = await suite.dbs.query(
      'app',
      `SELECT EXISTS (SELECT 1 FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid WHERE r.ev_class = 'public.ledger_view'::regclass AND d.refobjid = 'public.ledger'::regclass) AS view_on_old,
              (SELECT confrelid = 'public.ledger'::regclass FROM pg_constraint WHERE conrelid = 'public.ledger_refs'::regclass AND contype = 'f') AS fk_on_old,
              (SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'public.ledger'::regclass AND i.indisprimary) AS pkey,
              pg_get_serial_sequence('public.ledger', 'id') AS identity_sequence,
              (SELECT count(*)::int FROM pg_trigger WHERE tgrelid = 'public.ledger'::regclass AND tgname LIKE 'ferry%') AS triggers`,
    );
    expect(catalog).toEqual({ view_on_old: true, fk_on_old: true, pkey: 'ledger_pkey', identity_sequence: 'public.ledger_id_seq', triggers: 0 });
    const maxId = Math.max(...rows.map((r) => Number(r.id)));
    const [next] = await suite.dbs.query<{ id: string }>('app', 'INSERT INTO public.ledger (amount) VALUES (1) RETURNING id');
    expect(Number(next.id)).toBeGreaterThan(maxId);
  });
});
