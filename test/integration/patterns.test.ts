/**
 * Choosing tables by pattern against a real source: `tables:` patterns and `exclude:` choose
 * among the source's tables — a partitioned table once (its partitions move with it), never a
 * table of PostgreSQL's or Ferry's schemas — a named entry keeps its own target, preflight lists
 * what was chosen, a migration moves exactly those tables, and patterns that choose nothing are
 * refused with exit 2 before anything starts.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { displayQualified } from '../../src/core/identifiers';
import { expectCleanRun } from '../helpers/repairs';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { stackSuite } from '../helpers/suite';

const SOURCE = `
  CREATE SCHEMA app; CREATE SCHEMA billing; CREATE SCHEMA _ferry_scratch;
  CREATE TABLE app.orders (id int PRIMARY KEY, note text);
  CREATE TABLE app.users (id int PRIMARY KEY, name text);
  CREATE TABLE app.events (id int, at date NOT NULL, kind text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
  CREATE TABLE app.events_2025 PARTITION OF app.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
  CREATE TABLE app.events_2026 PARTITION OF app.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
  CREATE TABLE billing.invoice_2024 (id int PRIMARY KEY, total numeric);
  CREATE TABLE billing.invoice_2025 (id int PRIMARY KEY, total numeric);
  CREATE TABLE billing.invoices (id int PRIMARY KEY, total numeric);
  CREATE TABLE _ferry_scratch.notes (id int PRIMARY KEY);
  CREATE TABLE public.unrelated (id int PRIMARY KEY);
  CREATE SCHEMA logs; CREATE TABLE logs.audit_log (at timestamptz, line text); CREATE TABLE logs.keyed (id int PRIMARY KEY);
  INSERT INTO app.orders SELECT g, 'o' || g FROM generate_series(1, 3000) g;
  INSERT INTO app.users SELECT g, 'u' || g FROM generate_series(1, 500) g;
  INSERT INTO app.events SELECT g, date '2025-06-01' + (g % 400), 'k' || (g % 7) FROM generate_series(1, 2000) g;
  INSERT INTO billing.invoice_2024 SELECT g, g FROM generate_series(1, 100) g;
  INSERT INTO billing.invoice_2025 SELECT g, g * 2 FROM generate_series(1, 200) g;
  INSERT INTO billing.invoices SELECT g, g * 3 FROM generate_series(1, 300) g;
  INSERT INTO _ferry_scratch.notes SELECT g FROM generate_series(1, 10) g;
  INSERT INTO public.unrelated SELECT g FROM generate_series(1, 10) g;
  ANALYZE;`;

describe('tables chosen by pattern', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-patterns-'));
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };
  const suite = stackSuite({ name: 'patterns', databases: { source: SOURCE, target: '' }, connections: { legacy: 'source', v2: 'target' } });

  const spec = {
    source: 'legacy',
    target: 'v2',
    batchRows: 500,
    tables: ['app.*', 'billing.*', { name: 'billing.invoices', target: 'archive.invoices' }, 'no_such_schema.*'],
    exclude: ['billing.invoice_2024'],
  };

  it('plans the named table first, then what the patterns chose by schema and name, a partitioned table once and nothing of _ferry*', async () => {
    const plan = await suite.stack.ferry.preflight(spec, 'patterns-plan');
    expect(plan.tables.map((t) => `${displayQualified(t.source)} → ${displayQualified(t.target)}`)).toEqual([
      'billing.invoices → archive.invoices',
      'app.events → app.events',
      'app.orders → app.orders',
      'app.users → app.users',
      'billing.invoice_2025 → billing.invoice_2025',
    ]);
    const run = await suite.stack.runCli(['validate', file('plan.yaml', JSON.stringify({ ...spec, id: 'patterns-validate' })), '--connect']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('5 table(s): 1 named, the rest chosen by app.*, billing.*, no_such_schema.*, not billing.invoice_2024');
    expect(run.stdout).toContain('app.events → app.events');
    expect(run.stdout).not.toContain('events_2025 →');
  });

  it('moves exactly the chosen tables, row for row, and nothing else', async () => {
    const { ferry } = suite.stack;
    await ferry.start(spec, { id: 'patterns-move' });
    const result = await ferry.result('patterns-move');
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(ferry, result);
    for (const [source, target] of [
      ['app.orders', 'app.orders'],
      ['app.users', 'app.users'],
      ['app.events', 'app.events'],
      ['billing.invoice_2025', 'billing.invoice_2025'],
      ['billing.invoices', 'archive.invoices'],
    ]) {
      expect({ target, rows: await rowsAsText(suite.dbs, 'target', target, 'id') }).toEqual({ target, rows: await rowsAsText(suite.dbs, 'source', source, 'id') });
    }
    // The partitions came with their table, as partitions; nothing unchosen is on the target.
    expect(await suite.dbs.query('target', `SELECT count(*)::int AS n FROM app.events_2026`)).toEqual(await suite.dbs.query('source', `SELECT count(*)::int AS n FROM app.events_2026`));
    expect(
      await suite.dbs.query(
        'target',
        `SELECT to_regclass('billing.invoice_2024') AS a, to_regclass('billing.invoices') AS b, to_regclass('public.unrelated') AS c, to_regnamespace('_ferry_scratch') AS d`,
      ),
    ).toEqual([{ a: null, b: null, c: null, d: null }]);
  });

  it('refuses patterns that choose no table with exit 2, naming the field, and changes nothing', async () => {
    const before = [await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')];
    const empty = file('empty.yaml', 'id: patterns-empty\nsource: legacy\ntarget: v2\ntables: ["nothing_here.*", "app.zz*"]\nexclude: ["app.*"]\n');
    for (const args of [['validate', empty, '--connect'], ['start', empty]]) {
      const run = await suite.stack.runCli(args);
      expect({ args, code: run.code, stdout: run.stdout }).toEqual({ args, code: 2, stdout: '' });
      expect(run.stderr).toContain('refused (MissingTable)');
      expect(run.stderr).toContain("tables: nothing_here.*, app.zz* chose no table of the source (after exclude); check the patterns against the source's schemas");
    }
    expect([await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')]).toEqual(before);
  });

  it('refuses a chosen table without a key online as a named one, naming the pattern that chose it', async () => {
    const keyless = file('keyless.yaml', 'id: patterns-keyless\nsource: legacy\ntarget: v2\nmode: online\ntables: ["logs.*"]\n');
    const run = await suite.stack.runCli(['validate', keyless, '--connect']);
    expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 2, stdout: '' });
    expect(run.stderr).toContain('refused (NoPrimaryKey)');
    expect(run.stderr).toContain('tables[0] (logs.* chose logs.audit_log): table logs.audit_log has no primary key');
  });

  it('refuses patterns that choose more tables than one migration holds, with the count', async () => {
    await suite.dbs.exec('source', `CREATE SCHEMA crowd; DO $$ BEGIN FOR i IN 1..501 LOOP EXECUTE format('CREATE TABLE crowd.t%s (id int PRIMARY KEY)', i); END LOOP; END $$`);
    const crowd = file('crowd.yaml', 'id: patterns-crowd\nsource: legacy\ntarget: v2\nmode: online\ntables: ["crowd.*"]\n');
    const run = await suite.stack.runCli(['validate', crowd, '--connect']);
    expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 2, stdout: '' });
    expect(run.stderr).toContain(
      'tables: crowd.* chose 501 tables; one online migration moves at most 500 today (10000 in full mode, 500 online): split it into several specs (by schema, or with exclude:)',
    );
    // One fewer is taken; in full mode all of them.
    const full = file('full.yaml', 'id: patterns-full\nsource: legacy\ntarget: v2\ntables: ["crowd.*"]\n');
    const taken = await suite.stack.runCli(['validate', full, '--connect']);
    expect(taken.code).toBe(0);
    expect(taken.stdout).toContain('501 table(s): 0 named, the rest chosen by crowd.*');
    // More than a page of tables: the helper's plan lists the first 500 and counts the rest.
    expect(taken.stdout).toContain('  … and 1 more table(s), checked like these (a plan lists its first 500 here)');
    expect(taken.stdout).not.toContain('crowd.t99 →');
    const fewer = file('fewer.yaml', 'id: patterns-fewer\nsource: legacy\ntarget: v2\nmode: online\ntables: ["crowd.*"]\nexclude: ["crowd.t501"]\n');
    const accepted = await suite.stack.runCli(['validate', fewer, '--connect']);
    expect(accepted.code).toBe(0);
    expect(accepted.stdout).toContain('500 table(s): 0 named, the rest chosen by crowd.*, not crowd.t501');
  });
});
