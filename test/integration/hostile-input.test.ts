/**
 * Hostile input (issue 7). Every spec in test/fixtures/hostile — listed with where it is refused
 * and what the message must say in its manifest.yaml — is refused by the real `ferry` CLI with
 * exit code 2 and a message that names the field; afterwards Temporal ran no migration and
 * holds no running workflow, and neither database changed. And names that are SQL are only ever
 * quoted: tables called `weird"; DROP TABLE t; --` and friends migrate online like any other.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { main } from '../../src/cli/main';
import { PREFLIGHT_WORKFLOW } from '../../src/core/names';
import { MAX_SPEC_FILE_BYTES } from '../../src/spec-file';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { eventually, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const FIXTURES = join(__dirname, '..', 'fixtures', 'hostile');

interface CorpusEntry {
  file: string;
  refusedBy: 'schema' | 'preflight';
  /** The refusal type `ferry start` prints for a preflight refusal. */
  type?: string;
  stderr: string[];
}

const WEIRD = 'public."weird""; DROP TABLE t; --"';
const WEIRD_KEY = '"id""; $ferry$ NEW.x; DROP TABLE t; --"';
const WEIRD_VALUE = `"v'); DROP TABLE t; --"`;
const NEW_SCHEMA = '"new ""schema""; DROP TABLE t; --"';

const SOURCE = `
CREATE TABLE public.customers (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO public.customers SELECT g, 'customer ' || g FROM generate_series(1, 50) g;
CREATE TABLE public.orders (id int PRIMARY KEY, customer_id int NOT NULL, total numeric NOT NULL);
CREATE TABLE public.keyless (v int);
CREATE TABLE public.filled (id int PRIMARY KEY);
CREATE VIEW public.customer_view AS SELECT * FROM public.customers;
-- The table the hostile names try to drop.
CREATE TABLE public.t (id int PRIMARY KEY);
INSERT INTO public.t VALUES (1);
-- The positive control: every name here is valid (quoted) and is SQL.
CREATE TABLE ${WEIRD} (
  ${WEIRD_KEY} int PRIMARY KEY,
  ${WEIRD_VALUE} text NOT NULL DEFAULT 'x''); DROP TABLE t; --',
  n serial,
  CONSTRAINT "c""; DROP TABLE t; --" CHECK (${WEIRD_KEY} > 0)
);
CREATE UNIQUE INDEX "u""; DROP TABLE t; --" ON ${WEIRD} (${WEIRD_VALUE});
INSERT INTO ${WEIRD} (${WEIRD_KEY}, ${WEIRD_VALUE}) SELECT g, 'row ' || g || ' ''); DROP TABLE t; --' FROM generate_series(1, 300) g;
CREATE TABLE public.parent (id int PRIMARY KEY, v int);
CREATE INDEX "by_v ON public.parent USING btree" ON public.parent (v);
INSERT INTO public.parent SELECT g, g % 7 FROM generate_series(1, 20) g;
CREATE TABLE public.child (id int PRIMARY KEY, "p REFERENCES public.parent(id" int REFERENCES public.parent (id));
INSERT INTO public.child SELECT g, 1 + g % 20 FROM generate_series(1, 40) g;
ANALYZE;`;

const TARGET = `
CREATE TABLE public.filled (id int PRIMARY KEY);
INSERT INTO public.filled VALUES (1);
CREATE TABLE public.orders (id int PRIMARY KEY);
CREATE TABLE public.t (id int PRIMARY KEY);
INSERT INTO public.t VALUES (1);`;

/** Runs fn over items, `size` at a time (each CLI process costs about a second of CPU). */
async function inPool<T, R>(items: T[], size: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: size }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await fn(items[i]);
      }
    }),
  );
  return results;
}

type CliRun = { code: number | null; stdout: string; stderr: string };

/**
 * The CLI program (`main`, what bin/ferry.js calls) in this process, for verbs that refuse before
 * touching a server: `ferry validate`, and `ferry start` of a spec refused by its schema. A
 * spawned CLI costs a second of CPU; a few of them still run as real processes.
 */
async function cliInProcess(args: string[]): Promise<CliRun> {
  const out = { stdout: '', stderr: '' };
  const capture = (stream: 'stdout' | 'stderr') =>
    jest.spyOn(process[stream], 'write').mockImplementation((chunk: string | Uint8Array) => {
      out[stream] += chunk.toString();
      return true;
    });
  const spies = [capture('stdout'), capture('stderr')];
  try {
    const code = await main(['node', 'ferry', ...args]);
    return { code, ...out };
  } finally {
    for (const spy of spies) spy.mockRestore();
    process.exitCode = undefined;
  }
}

describe('hostile input', () => {
  let before: { source: string[]; target: string[] };
  const dir = mkdtempSync(join(tmpdir(), 'ferry-hostile-'));
  const corpus: (CorpusEntry & { path: string })[] = YAML.parse(readFileSync(join(FIXTURES, 'manifest.yaml'), 'utf8')).map((e: CorpusEntry) => ({
    ...e,
    path: join(FIXTURES, e.file),
  }));

  // Two entries are generated: a megabyte file does not belong in the repository.
  const oversized = join(dir, 'oversized.yaml');
  const padded = `source: legacy\ntarget: v2\ntables: [public.customers]\n${'# padding\n'.repeat(120_000)}`;
  writeFileSync(oversized, padded);
  const deep = join(dir, 'deeply-nested-metadata.json');
  writeFileSync(deep, `{"source":"legacy","target":"v2","tables":["public.customers"],"metadata":{"x":${'['.repeat(100_000)}${']'.repeat(100_000)}}}`);
  corpus.push(
    { file: 'oversized.yaml', path: oversized, refusedBy: 'schema', stderr: [`spec: ${oversized} is ${padded.length} bytes; a spec may have at most ${MAX_SPEC_FILE_BYTES} bytes`] },
    { file: 'deeply-nested-metadata.json', path: deep, refusedBy: 'schema', stderr: ['metadata: must be plain JSON data'] },
  );

  const suite = stackSuite({
    name: 'hostile',
    databases: { source: SOURCE, target: TARGET },
    connections: { legacy: 'source', v2: 'target' },
    seed: async (dbs) => {
      before = { source: await objectInventory(dbs, 'source'), target: await objectInventory(dbs, 'target') };
    },
  });

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  /** What is wrong with a refusal, or nothing: exit 2, nothing on stdout, every expected text on stderr, no stack trace. */
  function complaints(entry: CorpusEntry, verb: string, run: CliRun, expected: string[]): string[] {
    const found: string[] = [];
    if (run.code !== 2) found.push(`exit ${run.code}`);
    if (run.stdout !== '') found.push(`stdout ${JSON.stringify(run.stdout.slice(0, 200))}`);
    for (const text of expected) if (!run.stderr.includes(text)) found.push(`no ${JSON.stringify(text)}`);
    if (/\n\s+at \S+ \(/.test(run.stderr)) found.push('a stack trace');
    return found.length ? [`${verb} ${entry.file}: ${found.join('; ')} in stderr ${JSON.stringify(run.stderr.slice(0, 600))}`] : [];
  }

  it('holds the 92 hostile specs docs/reliability.md counts: every file of the directory listed once, and 2 generated, of both kinds', () => {
    const files = readdirSync(FIXTURES).filter((f) => f !== 'manifest.yaml').sort();
    const listed = corpus.filter((e) => e.path.startsWith(FIXTURES)).map((e) => e.file).sort();
    expect(listed).toEqual(files);
    expect(files).toHaveLength(90);
    expect(corpus).toHaveLength(92);
    const reliability = readFileSync(join(__dirname, '..', '..', 'docs', 'reliability.md'), 'utf8');
    expect(reliability).toContain(`${corpus.length} hostile specs (${files.length} files in \`test/fixtures/hostile\`, ${corpus.length - files.length} generated)`);
    expect(new Set(corpus.map((e) => e.file)).size).toBe(corpus.length);
    expect(corpus.filter((e) => e.refusedBy === 'preflight').length).toBeGreaterThanOrEqual(5);
    for (const e of corpus) expect(e.stderr.length).toBeGreaterThan(0);
  });

  it('refuses every schema-level spec from `ferry validate` and `ferry start` with exit 2, naming the field', async () => {
    const schemaLevel = corpus.filter((e) => e.refusedBy === 'schema');
    const expected = (entry: CorpusEntry) => ['ferry: the spec is invalid; nothing was started', ...entry.stderr];
    const problems: string[] = [];
    for (const entry of schemaLevel) {
      problems.push(...complaints(entry, 'validate', await cliInProcess(['validate', entry.path]), expected(entry)));
      problems.push(...complaints(entry, 'start', await cliInProcess(['start', entry.path]), expected(entry)));
    }
    // And as a user runs it, a real `ferry` process, for every seventh entry (one CLI process per
    // entry took about a minute alone, longer on a busy machine).
    const spawned = schemaLevel.filter((_, i) => i % 7 === 0);
    expect(spawned.length).toBeGreaterThanOrEqual(10);
    const starts = await inPool(spawned, 3, async (entry) => complaints(entry, 'start', await suite.stack.runCli(['start', entry.path]), expected(entry)));
    expect([...problems, ...starts.flat()]).toEqual([]);
  }, 300_000);

  it('refuses every preflight-level spec at `ferry start` with exit 2, the refusal type and the field, though `ferry validate` accepts it', async () => {
    const preflightLevel = corpus.filter((e) => e.refusedBy === 'preflight');
    const problems: string[] = [];
    for (const entry of preflightLevel) {
      const validate = await cliInProcess(['validate', entry.path]);
      if (validate.code !== 0 || !validate.stdout.startsWith('spec ok: ')) problems.push(`validate ${entry.file} did not accept it: ${validate.code} ${validate.stderr}`);
    }
    const starts = await inPool(preflightLevel, 3, async (entry) =>
      complaints(entry, 'start', await suite.stack.runCli(['start', entry.path]), [`ferry: refused (${entry.type}); nothing was started`, ...entry.stderr]),
    );
    expect([...problems, ...starts.flat()]).toEqual([]);
  });

  it('started no migration, left no workflow running and wrote nothing to either database', async () => {
    const refusedAtPreflight = corpus.filter((e) => e.refusedBy === 'preflight').length;
    const executions = async () => {
      const found: { type: string; status: string }[] = [];
      for await (const w of suite.stack.client.workflow.list({ query: `TaskQueue = '${suite.stack.taskQueue}'` })) found.push({ type: w.type, status: w.status.name });
      return found;
    };
    // Only the preflight helper ran, once per preflight-level spec, and each one has ended:
    // completed, its refusal its result (no red failed workflow in the Web UI).
    const found = await eventually(async () => {
      const all = await executions();
      return all.length === refusedAtPreflight && all.every((w) => w.status !== 'RUNNING') ? all : undefined;
    }, 20_000).catch(async () => executions());
    expect(found).toEqual(Array.from({ length: refusedAtPreflight }, () => ({ type: PREFLIGHT_WORKFLOW, status: 'COMPLETED' })));
    expect(await suite.stack.ferry.list()).toEqual([]);

    expect(await objectInventory(suite.dbs, 'source')).toEqual(before.source);
    expect(await objectInventory(suite.dbs, 'target')).toEqual(before.target);
    for (const role of ['source', 'target']) {
      expect(await suite.dbs.query(role, `SELECT nspname FROM pg_namespace WHERE nspname LIKE '\\_ferry%'`)).toEqual([]);
      expect(await suite.dbs.query(role, 'SELECT tgname FROM pg_trigger WHERE NOT tgisinternal')).toEqual([]);
      expect(await suite.dbs.query(role, 'SELECT evtname FROM pg_event_trigger')).toEqual([]);
      expect(await suite.dbs.query(role, 'SELECT count(*)::int AS n FROM public.t')).toEqual([{ n: 1 }]);
    }
    expect(await suite.dbs.query('source', 'SELECT count(*)::int AS n FROM public.customers')).toEqual([{ n: 50 }]);
    expect(await suite.dbs.query('target', 'SELECT count(*)::int AS n FROM public.filled')).toEqual([{ n: 1 }]);
  });

  it('migrates tables whose names, keys, columns, indexes and constraints are SQL, online through the CLI, quoting every one', async () => {
    const sourceBefore = await objectInventory(suite.dbs, 'source');
    const spec = join(dir, 'control.json');
    writeFileSync(
      spec,
      JSON.stringify({
        id: 'hostile-control',
        source: 'legacy',
        target: 'v2',
        mode: 'online',
        batchRows: 100,
        cutover: { approval: 'manual', afterwards: 'unfreeze' },
        tables: [
          { name: WEIRD, target: `${NEW_SCHEMA}."weird""; DROP TABLE t; --"`, chunks: 3 },
          { name: 'public.parent', target: `${NEW_SCHEMA}.parent` },
          { name: 'public.child', target: `${NEW_SCHEMA}.child` },
        ],
      }),
    );
    const start = await suite.stack.runCli(['start', spec]);
    expect(start.stdout.trim()).toBe('hostile-control');
    expect(start.code).toBe(0);

    // Writes after the copy go through the capture triggers, whose bodies hold the key column's name.
    await waitForPhase(suite.stack.ferry, 'hostile-control', 'AWAITING_APPROVAL');
    await suite.dbs.exec(
      'source',
      `INSERT INTO ${WEIRD} (${WEIRD_KEY}, ${WEIRD_VALUE}) VALUES (1001, 'new ''); DROP TABLE t; --');
       UPDATE ${WEIRD} SET ${WEIRD_VALUE} = ${WEIRD_VALUE} || ' (changed)' WHERE ${WEIRD_KEY} BETWEEN 10 AND 20;
       UPDATE ${WEIRD} SET ${WEIRD_KEY} = 2000 WHERE ${WEIRD_KEY} = 150;
       DELETE FROM ${WEIRD} WHERE ${WEIRD_KEY} BETWEEN 281 AND 290;
       INSERT INTO public.parent VALUES (21, 3);
       INSERT INTO public.child VALUES (41, 21);`,
    );
    expect((await suite.stack.runCli(['approve', 'hostile-control'])).code).toBe(0);
    const result = await suite.stack.runCli(['result', 'hostile-control', '--json']);
    expect(JSON.parse(result.stdout)).toMatchObject({ state: 'SUCCEEDED', error: null });
    expect(result.code).toBe(0);

    const moved = `${NEW_SCHEMA}."weird""; DROP TABLE t; --"`;
    expect(await rowsAsText(suite.dbs, 'target', moved, '1')).toEqual(await rowsAsText(suite.dbs, 'source', WEIRD, '1'));
    expect(await rowsAsText(suite.dbs, 'target', `${NEW_SCHEMA}.parent`, 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.parent', 'id'));
    expect(await rowsAsText(suite.dbs, 'target', `${NEW_SCHEMA}.child`, 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.child', 'id'));
    expect(await suite.dbs.query('target', `SELECT count(*)::int AS n FROM ${moved} WHERE ${WEIRD_KEY} IN (1001, 2000)`)).toEqual([{ n: 2 }]);

    // The indexes, constraints and sequence arrived under their own (hostile) names, on the new tables.
    const schema = 'new "schema"; DROP TABLE t; --';
    const indexes = await suite.dbs.query<{ indexname: string }>('target', 'SELECT indexname FROM pg_indexes WHERE schemaname = $1', [schema]);
    expect(indexes.map((i) => i.indexname).sort()).toEqual([
      'by_v ON public.parent USING btree',
      'child_pkey',
      'parent_pkey',
      'u"; DROP TABLE t; --',
      'weird"; DROP TABLE t; --_pkey',
    ]);
    const constraints = await suite.dbs.query<{ conname: string }>(
      'target',
      `SELECT conname, contype::text, convalidated, confrelid::regclass::text AS refers FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = $1 AND contype IN ('c', 'f')`,
      [schema],
    );
    expect(constraints.sort((a, b) => a.conname.localeCompare(b.conname))).toEqual([
      { conname: 'c"; DROP TABLE t; --', contype: 'c', convalidated: true, refers: '-' },
      { conname: 'child_p REFERENCES public.parent(id_fkey', contype: 'f', convalidated: true, refers: `${NEW_SCHEMA}.parent` },
    ]);
    const [{ next }] = await suite.dbs.query<{ next: string }>('target', `SELECT nextval(pg_get_serial_sequence($1, 'n'))::text AS next`, [moved]);
    expect(Number(next)).toBeGreaterThan(300);

    // The table the names tried to drop is still there on both sides, and Ferry left nothing behind on the source.
    for (const role of ['source', 'target']) expect(await suite.dbs.query(role, 'SELECT id FROM public.t')).toEqual([{ id: 1 }]);
    expect(await objectInventory(suite.dbs, 'source')).toEqual(sourceBefore);
    expect(await suite.dbs.query('target', `SELECT nspname FROM pg_namespace WHERE nspname LIKE '\\_ferry%'`)).toEqual([]);
  });
});
