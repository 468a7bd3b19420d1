/**
 * What goes wrong: refusals that must leave both databases untouched, a failure after the
 * target tables exist (rolled back), rows altered behind Ferry's back (found and repaired), and
 * damage that keeps coming back (ConsistencyBreach, rolled back). Checked with SQL.
 */
import { objectInventory, rowsAsText } from '../helpers/databases';
import { aroundActivities } from '../helpers/interceptors';
import { stackSuite } from '../helpers/suite';
import { RefusedError } from '../../src/client';
import type { ChecksumBlocksInput, ValidateChunkInput } from '../../activities/validate-chunk';

/** What a validation activity was asked: a key range compared on both sides, or one side's share of blocks. */
type Validation = ({ activity: 'validateChunk' } & ValidateChunkInput) | ({ activity: 'checksumBlocks' } & ChecksumBlocksInput);

describe('failures and repairs', () => {
  let tamper: ((input: Validation) => Promise<void>) | undefined;

  const suite = stackSuite({
    name: 'fail',
    databases: {
      source: `CREATE TABLE public.no_key (v int);
       CREATE TABLE public.accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2));
       INSERT INTO public.accounts SELECT g, 'owner ' || g, g * 1.5 FROM generate_series(1, 3000) g;
       CREATE TABLE public.strict (id int PRIMARY KEY, v int);
       INSERT INTO public.strict SELECT g, g FROM generate_series(1, 2000) g;
       INSERT INTO public.strict VALUES (2001, -1);
       ALTER TABLE public.strict ADD CONSTRAINT v_positive CHECK (v > 0) NOT VALID;
       CREATE TABLE public.filled (id int PRIMARY KEY);
       ANALYZE;`,
      target: `CREATE TABLE public.filled (id int PRIMARY KEY); INSERT INTO public.filled VALUES (1);`,
    },
    connections: { src: 'source', dst: 'target' },
    workers: 0,
    ready: async () => {
      await suite.stack.startWorker({
        // Before every validation statement, whichever activity runs it.
        interceptors: aroundActivities({
          validateChunk: { before: async (input) => tamper?.({ activity: 'validateChunk', ...(input as ValidateChunkInput) }) },
          checksumBlocks: { before: async (input) => tamper?.({ activity: 'checksumBlocks', ...(input as ChecksumBlocksInput) }) },
        }),
      });
    },
  });

  beforeEach(() => {
    tamper = undefined;
  });

  it.each([
    ['public.no_key', 'NoPrimaryKey', /table public\.no_key has no primary key and no unique index over NOT NULL columns: online, such a table moves only by logical capture of whole rows \(capture: logical or auto, and REPLICA IDENTITY FULL\), and logical capture is not possible: wal_level is replica.*; or add a key/],
    ['public.missing', 'MissingTable', /table public\.missing does not exist on source connection "src"/],
    ['public.filled', 'TargetNotEmpty', /target table public\.filled already has rows: empty it, or set truncate: true/],
  ])('refuses %s at preflight, names the fix, and changes nothing', async (table, type, message) => {
    const before = { source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') };
    const refusal = await suite.stack.ferry.start({ source: 'src', target: 'dst', mode: 'online', tables: [table] }, { id: `refuse-${type}` }).catch((e) => e);
    expect(refusal).toBeInstanceOf(RefusedError);
    expect(refusal.type).toBe(type);
    expect(refusal.message).toMatch(message);
    expect(await suite.stack.ferry.list()).toEqual([]);
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before.source);
    expect(await objectInventory(suite.dbs, 'target')).toEqual(before.target);
    expect(await suite.dbs.query('target', 'SELECT count(*)::int AS n FROM public.filled')).toEqual([{ n: 1 }]);
  });

  it('rolls back the target tables it created when the copy fails for good', async () => {
    const before = await objectInventory(suite.dbs, 'target');
    const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.accounts', 'public.strict'] }, { id: 'fails-after-create' });
    const result = await suite.stack.ferry.result(id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('PostgresError.23514');
    expect(result.error?.cause).toMatch(/violates check constraint "v_positive"/);
    expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['RollbackStarted', 'RolledBack', 'MigrationFinished']));
    expect(await objectInventory(suite.dbs, 'target')).toEqual(before);
    const status = await suite.stack.ferry.status(id);
    expect(status.transitions.filter((t) => t.machine === 'phase').map((t) => t.to)).toEqual(['FULL_MIGRATING', 'ROLLING_BACK', 'FAILED']);
  });

  it('finds rows altered in the target behind its back and repairs them', async () => {
    let done = false;
    tamper = async (input) => {
      if (done || input.table.source.name !== 'accounts') return;
      done = true;
      await suite.dbs.exec(
        'target',
        `UPDATE public.accounts SET balance = balance + 0.01 WHERE id = 1234;
         DELETE FROM public.accounts WHERE id = 77;
         INSERT INTO public.accounts VALUES (999999, 'intruder', 0);`,
      );
    };
    const { id } = await suite.stack.ferry.start(
      { source: 'src', target: 'dst', batchRows: 500, tables: [{ name: 'public.accounts', chunks: 1 }] },
      { id: 'repairs-tampering' },
    );
    const result = await suite.stack.ferry.result(id);
    expect(done).toBe(true);
    expect(result.state).toBe('SUCCEEDED');
    expect(await rowsAsText(suite.dbs, 'target', 'public.accounts', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.accounts', 'id'));
    const passed = result.events.find((e) => e.type === 'ValidationPassed');
    expect(passed?.detail?.repairedRanges).toBeGreaterThanOrEqual(2);
    await suite.dbs.exec('target', 'DROP TABLE public.accounts');
  });

  it("compares a table of two chunks by its sides' sums, each side read once, and its chunks only when they differ", async () => {
    const seen: string[] = [];
    const noted = (input: Validation) =>
      input.activity === 'checksumBlocks' ? `checksumBlocks:${input.connection}:${input.unit}/${input.units}` : `validateChunk:${JSON.stringify(input.range)}`;
    tamper = async (input) => {
      if (input.table.source.name === 'accounts') seen.push(noted(input));
    };
    const spec = { source: 'src', target: 'dst', batchRows: 500, tables: [{ name: 'public.accounts', chunks: 2 }] };
    const clean = await suite.stack.ferry.result((await suite.stack.ferry.start(spec, { id: 'blocks-clean' })).id);
    expect(clean.state).toBe('SUCCEEDED');
    // 3,000 rows: one share of blocks per side, and no key range read.
    expect(seen.sort()).toEqual(['checksumBlocks:dst:0/1', 'checksumBlocks:src:0/1']);
    expect(await rowsAsText(suite.dbs, 'target', 'public.accounts', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.accounts', 'id'));
    await suite.dbs.exec('target', 'DROP TABLE public.accounts');

    // Altered behind Ferry's back before the target's share is summed: the chunks, then a repair.
    seen.length = 0;
    let altered = false;
    tamper = async (input) => {
      if (input.table.source.name !== 'accounts') return;
      seen.push(noted(input));
      if (!altered && input.activity === 'checksumBlocks' && input.connection === 'dst') {
        altered = true;
        await suite.dbs.exec('target', `UPDATE public.accounts SET balance = balance + 0.01 WHERE id = 1234; DELETE FROM public.accounts WHERE id = 2900;`);
      }
    };
    const repaired = await suite.stack.ferry.result((await suite.stack.ferry.start(spec, { id: 'blocks-repaired' })).id);
    expect(repaired.state).toBe('SUCCEEDED');
    expect(seen.slice(0, 2).sort()).toEqual(['checksumBlocks:dst:0/1', 'checksumBlocks:src:0/1']);
    // Then each chunk on its own (never the whole table), the altered ones narrowed and repaired.
    expect(seen.length).toBeGreaterThanOrEqual(4);
    expect(seen.slice(2).every((s) => s.startsWith('validateChunk:') && s !== 'validateChunk:{"lower":null,"upper":null}')).toBe(true);
    expect(await rowsAsText(suite.dbs, 'target', 'public.accounts', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.accounts', 'id'));
    expect(repaired.events.find((e) => e.type === 'ValidationPassed')?.detail?.repairedRanges).toBeGreaterThanOrEqual(1);
    await suite.dbs.exec('target', 'DROP TABLE public.accounts');
  });

  it('gives up with ConsistencyBreach when the damage keeps coming back, and rolls back', async () => {
    tamper = async (input) => {
      if (input.table.source.name === 'accounts') await suite.dbs.exec('target', `UPDATE public.accounts SET owner = 'x' WHERE id = 10`);
    };
    const before = await objectInventory(suite.dbs, 'target');
    const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: [{ name: 'public.accounts', chunks: 2 }] }, { id: 'breach' });
    const result = await suite.stack.ferry.result(id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('ConsistencyBreach');
    expect(result.error?.message).toMatch(/public\.accounts: 1 key range\(s\) still differ between source and target after 3 repair round\(s\)/);
    expect(result.events.map((e) => e.type)).toContain('ConsistencyBreach');
    expect(await objectInventory(suite.dbs, 'target')).toEqual(before);
  });
});
