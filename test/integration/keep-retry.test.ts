/**
 * `onFailure: keep` in online mode: the failed migration keeps its change capture, so the writes
 * the application makes while it is FAILED are logged; `ferry retry` resumes from the kept
 * checkpoints and log and cuts over with every one of them. A kept migration that is never
 * retried is removed by `ferry cleanup`. Checked with SQL on both databases.
 */
import { accounts, seedSql } from '../fixtures/seeds';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

describe('an online migration kept after a failure', () => {

  const suite = stackSuite({
    name: 'keep',
    databases: { source: seedSql(accounts(5000)), target: '' },
    connections: { live: 'source', next: 'target' },
    perTest: 'databases',
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
    await suite.stack.ferry.start(spec, { id });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    await suite.dbs.exec('target', `ALTER TABLE public.accounts ADD COLUMN audit text NOT NULL DEFAULT 'x';
      ALTER TABLE public.accounts ALTER COLUMN audit DROP DEFAULT;`);
    await suite.dbs.exec('source', `UPDATE public.accounts SET note = 'before the failure' WHERE id <= 20`);
    const failed = await resultWithin(suite.stack.ferry, id, 60_000);
    expect(failed.state).toBe('FAILED');
    expect(failed.error?.type).toBe('PostgresError.23502');
    expect(failed.warnings.join()).toMatch(/onFailure: keep/);
  }

  /** The application writes while the migration is FAILED: the freeze must let it. */
  async function writeInTheGap(): Promise<void> {
    await suite.dbs.exec('source', `UPDATE public.accounts SET balance = balance + 1, note = 'in the gap' WHERE id BETWEEN 100 AND 150;
      DELETE FROM public.accounts WHERE id = 200;
      INSERT INTO public.accounts VALUES (999999, 1, 'inserted in the gap');`);
  }

  it('logs the writes made while FAILED and, after ferry retry and approve, moves every one of them', async () => {
    await failAfterTheCopy('keep-retry');
    expect(await suite.dbs.query('source', `SELECT count(*)::int AS n FROM pg_trigger WHERE tgname LIKE 'ferry\\_capture\\_%'`)).toEqual([{ n: 1 }]);
    await writeInTheGap();
    await suite.dbs.exec('target', 'ALTER TABLE public.accounts DROP COLUMN audit');

    const retry = await suite.stack.runCli(['retry', 'keep-retry']);
    expect(retry.code).toBe(0);
    await waitForPhase(suite.stack.ferry, 'keep-retry', 'AWAITING_APPROVAL');
    await suite.stack.ferry.approve('keep-retry');
    const result = await resultWithin(suite.stack.ferry, 'keep-retry', 60_000);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(await rowsAsText(suite.dbs, 'target', 'public.accounts', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.accounts', 'id'));
    expect(await suite.dbs.query('target', `SELECT count(*)::int AS n FROM public.accounts WHERE note IN ('before the failure', 'in the gap')`)).toEqual([{ n: 71 }]);
  });

  it('is removed from both databases by ferry cleanup when it is never retried', async () => {
    const before = { source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') };
    await failAfterTheCopy('keep-cleanup');
    await writeInTheGap();

    const cleanup = await suite.stack.runCli(['cleanup', 'keep-cleanup']);
    expect(cleanup.stderr).toBe('');
    expect(cleanup.stdout).toBe('keep-cleanup: capture, guard and freeze removed from the source; dropped on the target: table public.accounts\n');
    expect(cleanup.code).toBe(0);
    expect({ source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') }).toEqual(before);
    await suite.dbs.exec('source', `UPDATE public.accounts SET note = 'writable' WHERE id = 1; TRUNCATE public.accounts`);
  });
});
