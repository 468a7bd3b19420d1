/**
 * Preflight against what already sits on the target, through the real CLI: column types that
 * cannot take the source's values are refused before anything starts (exit 2, the columns
 * named), and a table renamed next to its original in the same schema gets free names for its
 * primary key and indexes instead of failing in prepareTarget.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { stackSuite } from '../helpers/suite';

describe('preflight against an existing target', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-preflight-target-'));
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };

  const suite = stackSuite({
    name: 'pftarget',
    databases: {
      source: `CREATE TYPE public.mood AS ENUM ('calm', 'busy', 'ecstatic');
       CREATE TABLE public.payments (id int PRIMARY KEY, amount numeric(12,2) NOT NULL, label text, qty smallint, code varchar(10), mood public.mood);
       INSERT INTO public.payments SELECT g, g * 1.5, 'label ' || g, g % 100, 'c' || g, (ARRAY['calm', 'busy', 'ecstatic'])[1 + g % 3]::public.mood FROM generate_series(1, 300) g;
       CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text NOT NULL UNIQUE, total numeric CHECK (total >= 0));
       CREATE INDEX orders_total_idx ON public.orders (total);
       INSERT INTO public.orders SELECT g, 'customer ' || g, g FROM generate_series(1, 500) g;`,
      target: '',
    },
    connections: { legacy: 'source', v2: 'target', same: 'source' },
  });

  it('refuses, with exit 2 and every column named, a target whose column types cannot take the source values, and writes nothing', async () => {
    // label int cannot take text, code varchar(4) not every varchar(10), amount numeric(5,2) not every numeric(12,2).
    // …and its enum lacks a label the source's has.
    await suite.dbs.exec('target', `CREATE TYPE public.mood AS ENUM ('calm', 'busy');
      CREATE TABLE public.payments (id int PRIMARY KEY, amount numeric(5,2), label int, qty int, code varchar(4), mood public.mood)`);
    try {
      const before = [await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')];
      const spec = file('types.yaml', 'id: pf-types\nsource: legacy\ntarget: v2\ntables: [public.payments]\n');
      for (const args of [['validate', spec, '--connect'], ['start', spec]]) {
        const run = await suite.stack.runCli(args);
        expect({ args, code: run.code, stdout: run.stdout }).toEqual({ args, code: 2, stdout: '' });
        expect(run.stderr).toContain('refused (IncompatibleTarget)');
        expect(run.stderr).toContain('tables[0]: target table public.payments cannot take every value of source public.payments');
        expect(run.stderr).toContain('column "amount" is numeric(5,2) but numeric(12,2) on the source');
        expect(run.stderr).toContain('column "label" is integer but text on the source');
        expect(run.stderr).toContain('column "code" is character varying(4) but character varying(10) on the source');
        // smallint into integer always fits: not named.
        expect(run.stderr).not.toContain('"qty"');
        expect(run.stderr).toContain(`column "mood" is enum public.mood, which lacks 'ecstatic' on the target`);
        expect(run.stderr).toContain(
          "(ALTER TABLE public.payments ALTER COLUMN amount TYPE numeric(12,2), ALTER COLUMN label TYPE text, ALTER COLUMN code TYPE character varying(10); ALTER TYPE public.mood ADD VALUE 'ecstatic')",
        );
      }
      expect((await suite.stack.runCli(['status', 'pf-types'])).code).toBe(1);
      expect([await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')]).toEqual(before);
      expect(await suite.dbs.query('target', 'SELECT count(*)::int AS n FROM public.payments')).toEqual([{ n: 0 }]);
    } finally {
      await suite.dbs.exec('target', 'DROP TABLE public.payments; ALTER TYPE public.mood ADD VALUE \'ecstatic\'');
    }
  });

  it('accepts a target whose column types take every source value (text, wider integers and lengths) and copies the rows', async () => {
    await suite.dbs.exec('target', 'CREATE TABLE public.payments (id int PRIMARY KEY, amount text NOT NULL, label varchar, qty bigint, code varchar(20), mood public.mood)');
    const spec = file('wider.yaml', 'id: pf-wider\nsource: legacy\ntarget: v2\ntables: [public.payments]\n');
    const plan = await suite.stack.runCli(['validate', spec, '--connect']);
    expect(plan.code).toBe(0);
    expect(plan.stdout).toContain('note: column "amount" is text on the target, numeric(12,2) on the source: values arrive in their text form');
    const run = await suite.stack.runCli(['start', spec, '--wait']);
    expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 0, stdout: expect.stringMatching(/migration pf-wider SUCCEEDED/) });
    expect(await suite.dbs.query('target', 'SELECT id, amount, label, qty::text, code, mood::text FROM public.payments ORDER BY id')).toEqual(
      await suite.dbs.query('source', 'SELECT id, amount::text, label, qty::text, code, mood::text FROM public.payments ORDER BY id'),
    );
  });

  it('gives a table renamed next to its original its own names for the primary key, unique constraint and indexes, online and in full mode', async () => {
    // Online: prepareTarget creates the primary key with the table (full mode builds it after the load).
    const spec = file('renamed.yaml', 'id: pf-renamed\nsource: legacy\ntarget: same\nmode: online\ncutover: {afterwards: unfreeze}\ntables: [{name: public.orders, target: public.orders_b}]\n');
    const plan = await suite.stack.runCli(['validate', spec, '--connect']);
    const run = await suite.stack.runCli(['start', spec, '--wait']);
    expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 0, stdout: expect.stringMatching(/migration pf-renamed SUCCEEDED/) });
    expect(plan.code).toBe(0);
    expect(plan.stdout).toContain('note: primary key orders_pkey is created as orders_b_pkey: schema public already has a relation orders_pkey');
    expect(plan.stdout).toContain('note: index orders_total_idx is created as orders_b_total_idx: schema public already has a relation orders_total_idx');
    expect(await rowsAsText(suite.dbs, 'source', 'public.orders_b', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.orders', 'id'));
    const indexes = async (table: string) =>
      (await suite.dbs.query<{ name: string }>('source', `SELECT indexrelid::regclass::text AS name FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`, [table])).map((r) => r.name);
    expect(await indexes('public.orders')).toEqual(['orders_customer_key', 'orders_pkey', 'orders_total_idx']);
    expect(await indexes('public.orders_b')).toEqual(['orders_b_customer_key', 'orders_b_pkey', 'orders_b_total_idx']);
    const constraints = await suite.dbs.query<{ conname: string; contype: string }>(
      'source',
      `SELECT conname, contype::text FROM pg_constraint WHERE conrelid = 'public.orders_b'::regclass ORDER BY conname`,
    );
    expect(constraints).toEqual([
      { conname: 'orders_b_customer_key', contype: 'u' },
      { conname: 'orders_b_pkey', contype: 'p' },
      { conname: 'orders_total_check', contype: 'c' },
    ]);

    // Full mode builds the primary key after the load, under the free name too.
    const full = await suite.stack.runCli(['start', file('full.yaml', 'id: pf-full\nsource: legacy\ntarget: same\ntables: [{name: public.orders, target: public.orders_f}]\n'), '--wait']);
    expect({ code: full.code, stdout: full.stdout }).toEqual({ code: 0, stdout: expect.stringMatching(/migration pf-full SUCCEEDED/) });
    expect(await rowsAsText(suite.dbs, 'source', 'public.orders_f', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.orders', 'id'));
    expect(await indexes('public.orders_f')).toEqual(['orders_f_customer_key', 'orders_f_pkey', 'orders_f_total_idx']);
    expect(await indexes('public.orders')).toEqual(['orders_customer_key', 'orders_pkey', 'orders_total_idx']);
  });

  it('rolls a renamed table back without touching the original it sits next to', async () => {
    const before = await objectInventory(suite.dbs, 'source');
    // A row the target refuses after the table was created: the copy fails and rollback runs.
    await suite.dbs.exec('source', `ALTER TABLE public.orders ADD CONSTRAINT orders_small CHECK (id < 400) NOT VALID`);
    try {
      const spec = file('rollback.yaml', 'id: pf-rollback\nsource: legacy\ntarget: same\nmode: online\ncutover: {afterwards: unfreeze}\ntables: [{name: public.orders, target: public.orders_c}]\n');
      const run = await suite.stack.runCli(['start', spec, '--wait']);
      expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 1, stdout: expect.stringMatching(/violates check constraint "orders_small"/) });
    } finally {
      await suite.dbs.exec('source', 'ALTER TABLE public.orders DROP CONSTRAINT orders_small');
    }
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before);
  });
});
