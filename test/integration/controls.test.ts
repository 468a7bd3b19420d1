/**
 * The controls, the same for both products: each case runs once against a migration (a capped
 * copy) and once against a change plan (a capped backfill), sends the same signals and expects
 * the same record. They disagreed before: a throttle naming only batchRows dropped a migration's
 * rate cap but not a plan's, a plan clamped an out-of-range batchRows to 100,000 in silence, and
 * only a migration's cancel named who cancelled (and recorded it `running → cancel requested`).
 * Since, both take them through one control desk (workflows/control-desk.ts).
 */
import { FerryClient } from '../../src/client';
import { ControlTransition } from '../../src/core/status';
import { expectCleanRun } from '../helpers/repairs';
import { rowsAsText, TestDatabases } from '../helpers/databases';
import { eventually } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const ROWS = 40_000;

interface Product {
  /** A batch size past the product's range (a copy's is 100–1,000,000 rows, a backfill's 100–100,000). */
  tooBig: number;
  start(ferry: FerryClient, id: string): Promise<unknown>;
  /** Whether its copy or backfill has moved rows. */
  moving(ferry: FerryClient, id: string): Promise<boolean>;
  status(ferry: FerryClient, id: string): Promise<{ transitions: { machine: string }[]; warnings?: string[] }>;
  result(ferry: FerryClient, id: string): Promise<{ state: string; error: { message: string } | null; controls?: ControlTransition[] }>;
  /** What a run that succeeded must show in the databases (and, for a migration, that validation repaired nothing). */
  checkDone(suite: { dbs: TestDatabases; ferry: FerryClient }, id: string): Promise<void>;
}

const PRODUCTS: Record<'migration' | 'change plan', Product> = {
  migration: {
    tooBig: 5_000_000,
    start: (ferry, id) => ferry.start({ source: 'src', target: 'dst', batchRows: 500, tables: [{ name: 'public.items', target: `public.items_${id.replace(/\W/g, '_')}` }] }, { id }),
    moving: async (ferry, id) => (await ferry.status(id)).tables.some((t) => t.rowsCopied > 0),
    status: (ferry, id) => ferry.status(id),
    result: (ferry, id) => ferry.result(id),
    checkDone: async ({ dbs, ferry }, id) => {
      expect(await rowsAsText(dbs, 'target', `public.items_${id.replace(/\W/g, '_')}`, 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.items', 'id'));
      await expectCleanRun(ferry, await ferry.result(id));
    },
  },
  'change plan': {
    tooBig: 500_000,
    start: (ferry, id) => ferry.startChange({ kind: 'change', id, database: 'src', steps: [{ backfill: { table: 'public.items', set: { n: 'n + 1' }, batchRows: 500 } }] }),
    moving: async (ferry, id) => ((await ferry.changeStatus(id)).steps[0].progress?.done ?? 0) > 0,
    status: (ferry, id) => ferry.changeStatus(id),
    result: (ferry, id) => ferry.changeResult(id),
    // Every row's n went up by one (the plan's only run on this table).
    checkDone: async ({ dbs }) => {
      expect(await dbs.query('source', 'SELECT count(*)::int AS rows, min(n) AS min, max(n) AS max FROM public.items')).toEqual([{ rows: ROWS, min: 1, max: 1 }]);
    },
  },
};

const controlsOf = (transitions: { machine: string }[]) =>
  transitions.filter((t): t is ControlTransition => t.machine === 'control').map(({ at: _at, machine: _m, ...c }) => c);

describe.each(Object.entries(PRODUCTS))('controls of a %s', (kind, product) => {
  const suite = stackSuite({
    name: `controls_${kind.replace(/\W/g, '_')}`,
    databases: {
      source: `CREATE TABLE public.items (id int PRIMARY KEY, n int NOT NULL DEFAULT 0);
        INSERT INTO public.items (id) SELECT g FROM generate_series(1, ${ROWS}) g;
        ANALYZE;`,
      target: '',
    },
    connections: { src: 'source', dst: 'target' },
  });
  const id = (name: string) => `${kind === 'migration' ? 'm' : 'c'}-${name}`;

  it('a throttle changes only what it names; a batchRows out of range from any client is refused with a warning', async () => {
    const { ferry, client } = suite.stack;
    const name = id('throttled');
    await product.start(ferry, name);
    await ferry.throttle(name, { rowsPerSecond: 1000 });
    await eventually(() => product.moving(ferry, name), 60_000, 100);
    // Only batchRows: the cap stays.
    await ferry.throttle(name, { batchRows: 200 }, { actor: 'ops', reason: 'smaller batches' });
    // From another client, as the temporal CLI could send it, past the product's range.
    await client.workflow.getHandle(name).signal('throttle', { batchRows: product.tooBig });
    const warned = await eventually(async () => (await product.status(ferry, name)).warnings?.find((w) => w.startsWith('ignored a throttle signal')), 30_000);
    expect(warned).toMatch(/^ignored a throttle signal: throttle\.batchRows must be a whole number from 100 to \d+$/);
    await ferry.throttle(name, { rowsPerSecond: 0 });
    const result = await product.result(ferry, name);
    expect(result.state).toBe('SUCCEEDED');
    await product.checkDone({ dbs: suite.dbs, ferry }, name);
    expect(controlsOf(result.controls ?? [])).toEqual([
      { signal: 'throttle', from: 'no cap', to: '1000 rows/s' },
      { signal: 'throttle', from: '1000 rows/s', to: '1000 rows/s, 200 rows a batch', actor: 'ops', reason: 'smaller batches' },
      { signal: 'throttle', from: '1000 rows/s, 200 rows a batch', to: 'no cap, 200 rows a batch' },
    ]);
  });

  it('pause, resume and approve are on record with who and why; a cancel names who cancelled in its reason, recorded running → cancelling', async () => {
    const { ferry } = suite.stack;
    const name = id('cancelled');
    await product.start(ferry, name);
    await ferry.throttle(name, { rowsPerSecond: 500 });
    await eventually(() => product.moving(ferry, name), 60_000, 100);
    await ferry.pause(name, { actor: 'alice', reason: 'vacuum window' });
    await ferry.resume(name, { actor: 'bob' });
    await ferry.approve(name, { actor: 'dave', reason: 'looks right' });
    await ferry.cancel(name, 'wrong table', 'carol');
    const result = await product.result(ferry, name);
    expect(result.state).toBe('CANCELLED');
    expect(result.error?.message).toMatch(/wrong table \(by carol\)/);
    expect(controlsOf(result.controls ?? []).map((c) => [c.signal, c.actor, c.reason])).toEqual([
      ['throttle', undefined, undefined],
      ['pause', 'alice', 'vacuum window'],
      ['resume', 'bob', undefined],
      ['approve', 'dave', 'looks right'],
      ['cancel', 'carol', 'wrong table'],
    ]);
    // The same moves in both (a migration's cancel said `running → cancel requested`).
    expect(controlsOf(result.controls ?? []).slice(1).map((c) => [c.signal, c.from, c.to])).toEqual([
      ['pause', 'running', 'paused'],
      ['resume', 'paused', 'running'],
      ['approve', 'waiting', 'approved'],
      ['cancel', 'running', 'cancelling'],
    ]);
  });
});
