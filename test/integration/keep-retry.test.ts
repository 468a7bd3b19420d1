/**
 * `onFailure: keep` in online mode: the failed migration keeps its change capture, so the writes
 * the application makes while it is FAILED are logged; `ferry retry` resumes from the kept
 * checkpoints and log and cuts over with every one of them. A kept migration that is never
 * retried is removed by `ferry cleanup`. Checked with SQL on both databases.
 */
import { objectInventory, rowsAsText, TestDatabases } from '../helpers/databases';
import { resultWithin, TestStack, waitForPhase } from '../helpers/stack';

const SCHEMA = `
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12,2), note text);
INSERT INTO public.accounts SELECT g, g / 10.0, 'seed ' || g FROM generate_series(1, 5000) g;
ANALYZE;`;

describe('an online migration kept after a failure', () => {
  let dbs: TestDatabases;
  let stack: TestStack;

  beforeAll(async () => {
    stack = await TestStack.start({ connections: {} });
  });

  afterAll(async () => {
    await stack?.teardown();
  });

  beforeEach(async () => {
    dbs = await TestDatabases.create('keep', ['source', 'target']);
    await dbs.exec('source', SCHEMA);
    await stack.stopInProcessWorkers();
    stack.env.FERRY_CONN_LIVE = dbs.url('source');
    stack.env.FERRY_CONN_NEXT = dbs.url('target');
    await stack.startWorker();
  });

  afterEach(async () => {
    await dbs?.drop();
  });

  // Count validation cannot see an update, so nothing but the change log can bring the updates
  // made while the migration was FAILED (checksum validation would find and repair them).
  const spec = {
    source: 'live',
    target: 'next',
    mode: 'online',
    onFailure: 'keep',
    validation: 'count',
    tables: [{ name: 'public.accounts', chunks: 1 }],
    cutover: { approval: 'manual', approvalTimeout: '10m' },
  };

  /** Someone adds a NOT NULL column to the target table: the next change the sync applies fails for good. */
  async function failAfterTheCopy(id: string): Promise<void> {
    await stack.ferry.start(spec, { id });
    await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
    await dbs.exec('target', `ALTER TABLE public.accounts ADD COLUMN audit text NOT NULL DEFAULT 'x';
      ALTER TABLE public.accounts ALTER COLUMN audit DROP DEFAULT;`);
    await dbs.exec('source', `UPDATE public.accounts SET note = 'before the failure' WHERE id <= 20`);
    const failed = await resultWithin(stack.ferry, id, 60_000);
    expect(failed.state).toBe('FAILED');
    expect(failed.error?.type).toBe('PostgresError.23502');
    expect(failed.warnings.join()).toMatch(/onFailure: keep/);
  }

  /** The application writes while the migration is FAILED: the freeze must let it. */
  async function writeInTheGap(): Promise<void> {
    await dbs.exec('source', `UPDATE public.accounts SET balance = balance + 1, note = 'in the gap' WHERE id BETWEEN 100 AND 150;
      DELETE FROM public.accounts WHERE id = 200;
      INSERT INTO public.accounts VALUES (999999, 1, 'inserted in the gap');`);
  }

  it('logs the writes made while FAILED and, after ferry retry and approve, moves every one of them', async () => {
    await failAfterTheCopy('keep-retry');
    expect(await dbs.query('source', `SELECT count(*)::int AS n FROM pg_trigger WHERE tgname LIKE 'ferry\\_capture\\_%'`)).toEqual([{ n: 1 }]);
    await writeInTheGap();
    await dbs.exec('target', 'ALTER TABLE public.accounts DROP COLUMN audit');

    const retry = await stack.runCli(['retry', 'keep-retry']);
    expect(retry.code).toBe(0);
    await waitForPhase(stack.ferry, 'keep-retry', 'AWAITING_APPROVAL');
    await stack.ferry.approve('keep-retry');
    const result = await resultWithin(stack.ferry, 'keep-retry', 60_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(await rowsAsText(dbs, 'target', 'public.accounts', 'id')).toEqual(await rowsAsText(dbs, 'source', 'public.accounts', 'id'));
    expect(await dbs.query('target', `SELECT count(*)::int AS n FROM public.accounts WHERE note IN ('before the failure', 'in the gap')`)).toEqual([{ n: 71 }]);
  });

  it('is removed from both databases by ferry cleanup when it is never retried', async () => {
    const before = { source: await objectInventory(dbs, 'source'), target: await objectInventory(dbs, 'target') };
    await failAfterTheCopy('keep-cleanup');
    await writeInTheGap();

    const cleanup = await stack.runCli(['cleanup', 'keep-cleanup']);
    expect(cleanup.stderr).toBe('');
    expect(cleanup.stdout).toBe('keep-cleanup: capture, guard and freeze removed from the source; dropped on the target: table public.accounts\n');
    expect(cleanup.code).toBe(0);
    expect({ source: await objectInventory(dbs, 'source'), target: await objectInventory(dbs, 'target') }).toEqual(before);
    await dbs.exec('source', `UPDATE public.accounts SET note = 'writable' WHERE id = 1; TRUNCATE public.accounts`);
  });
});
