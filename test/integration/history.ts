/**
 * A migration's history must not grow with time: Temporal terminates a run at its history limit,
 * and a terminated migration runs no compensation. On a dev server with a small limit, an online
 * migration waits for approval under writes until a table workflow has continued as new and must
 * still complete; and a migration terminated anyway is cleaned up from its bookkeeping alone
 * (`ferry cleanup`).
 *
 * The suite: `minWaitMs` is how long the wait under writes lasts at least — a minute in the soak
 * tier (test/soak/history.test.ts, that case alone), only until a table has continued as new in
 * `npm test` (test/integration/history.test.ts, with the cleanup cases: `others`).
 */
import { accounts, docs, items, seedSql, tags } from '../fixtures/seeds';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { expectCleanRun } from '../helpers/repairs';
import { resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { startWriters } from '../helpers/writers';

const TABLES: [string, string][] = [
  ['public.accounts', 'id'],
  ['public.items', 'a, b'],
  ['public.docs', 'id'],
  ['public.tags', 'id'],
];

const MAX_WAIT_UNDER_WRITES_MS = 5 * 60_000;

/**
 * `historyLimit`: Temporal terminates a run at this many events (the default is 51,200) and
 * suggests continuing as new at half of it.
 */
export function historySuite({ minWaitMs, historyLimit: HISTORY_LIMIT, others }: { minWaitMs: number; historyLimit: number; others: boolean }): void {
  describe('a migration that runs for a long time', () => {
    const suite = stackSuite({
      name: 'history',
      databases: { source: seedSql(accounts(5000), items(2000), docs(500), tags(300)), target: '' },
      connections: { live: 'source', next: 'target' },
      temporal: {
        dynamicConfig: {
          'limit.historyCount.error': HISTORY_LIMIT,
          'limit.historyCount.warn': HISTORY_LIMIT / 2,
          'limit.historyCount.suggestContinueAsNew': HISTORY_LIMIT / 2,
        },
      },
      // Fresh databases for each case, one Temporal server for all (each case has its own id).
      perTest: 'databases',
    });

    const spec = {
      source: 'live',
      target: 'next',
      mode: 'online',
      batchRows: 1000,
      tables: TABLES.map(([t]) => t),
      cutover: { approval: 'manual', approvalTimeout: '1h' },
    };
    const historyLength = async (workflowId: string) => (await suite.stack.client.workflow.getHandle(workflowId).fetchHistory()).events?.length ?? 0;
    /** How many runs a workflow id has had (each continue-as-new starts one). */
    const tableRuns = async (workflowId: string) => (await suite.stack.client.workflow.count(`WorkflowId = '${workflowId}'`)).count;

    it(`waits for approval under writes until a table's history passes the ${HISTORY_LIMIT}-event limit (it continues as new), then completes`, async () => {
      const { id } = await suite.stack.ferry.start(spec, { id: 'history-wait' });
      const writers = await startWriters(suite.dbs.url('source'), 2);
      let result;
      const lengths: number[] = [];
      try {
        await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
        // The wait is the scenario: writes, the tables syncing, nobody approving — for at least
        // minWaitMs and until a table workflow has reached the history limit and continued as new
        // (at 500 events the busiest did within a minute here; the quietest, over four), with more
        // than a thousand writes made meanwhile.
        const began = Date.now();
        for (;;) {
          lengths.push(await historyLength(id));
          const status = await suite.stack.ferry.status(id);
          expect(status.endedAt).toBeUndefined();
          const runs = await Promise.all(TABLES.map((_, i) => tableRuns(`${id}/table-${i}`)));
          if (Date.now() - began >= minWaitMs && runs.some((n) => n >= 2) && writers.stats.operations > 1000) break;
          if (Date.now() - began > MAX_WAIT_UNDER_WRITES_MS) throw new Error(`table workflows' runs after ${MAX_WAIT_UNDER_WRITES_MS} ms: ${runs.join(', ')}`);
          await new Promise((r) => setTimeout(r, 2_000));
        }
        console.log(`history: a table continued as new within ${Date.now() - began} ms of the wait; the parent's history ${lengths[lengths.length - 1]} events`);
        // Progress is still readable, though the parent heard nothing of it: lag from the tables.
        const status = await suite.stack.ferry.status(id);
        expect(status.tables.every((t) => t.lag !== undefined)).toBe(true);
        await suite.stack.ferry.approve(id);
        result = await resultWithin(suite.stack.ferry, id, 120_000);
      } finally {
        await writers.stop();
      }
      expect({ state: result.state, error: result.error }).toEqual({ state: 'SUCCEEDED', error: null });
      expect(writers.stats.operations).toBeGreaterThan(1000);
      for (const [table, key] of TABLES) {
        expect(await rowsAsText(suite.dbs, 'target', table, key)).toEqual(await rowsAsText(suite.dbs, 'source', table, key));
      }
      // The parent's history did not grow while it waited, and stayed far from the limit.
      expect(lengths[lengths.length - 1] - lengths[0]).toBeLessThanOrEqual(10);
      const whole = await historyLength(id);
      console.log(`history: the parent's whole history ${whole} events (${lengths[lengths.length - 1]} while it waited)`);
      expect(whole).toBeLessThan(HISTORY_LIMIT * 0.8);
      // Nobody damaged it: validation had nothing to repair, in any run of any table.
      await expectCleanRun(suite.stack.ferry, result);
    }, 480_000);

    /** `it` for the cases this tier runs; the others are not registered at all. */
    const maybe = others ? it : ((() => undefined) as unknown as typeof it);
    maybe('is cleaned up from its bookkeeping alone after it was terminated (`ferry cleanup`)', async () => {
      const before = { source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') };
      const { id } = await suite.stack.ferry.start(spec, { id: 'history-terminated' });
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      // Terminated: no compensation runs, capture and the freeze stay on the source.
      await suite.stack.client.workflow.getHandle(id).terminate('operator terminated it');
      expect(await objectInventory(suite.dbs, 'source')).not.toEqual(before.source);
      const cleanup = await suite.stack.runCli(['cleanup', id]);
      expect(cleanup.stderr).toBe('');
      expect(cleanup.code).toBe(0);
      expect(cleanup.stdout).toMatch(/capture, guard and freeze removed from the source; dropped on the target: table/);
      expect(await objectInventory(suite.dbs, 'source')).toEqual(before.source);
      expect(await objectInventory(suite.dbs, 'target')).toEqual(before.target);
      await suite.dbs.exec('source', `UPDATE public.tags SET name = 'writable' WHERE id = 1`);
    });

    maybe('keeps the target of a migration terminated after its cutover completed, and its freeze', async () => {
      const { id } = await suite.stack.ferry.start(spec, { id: 'history-completed' });
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      // As if terminated right after the drain: the target's bookkeeping says it is complete.
      await suite.dbs.exec('target', `UPDATE _ferry.migrations SET completed_at = now() WHERE id = 'history-completed'`);
      await suite.stack.client.workflow.getHandle(id).terminate('terminated after the cutover');
      const cleanup = await suite.stack.runCli(['cleanup', id]);
      expect(cleanup.code).toBe(0);
      expect(cleanup.stdout).toBe(
        "history-completed: capture removed from the source; the freeze stays (ferry unfreeze history-completed lifts it); the target's tables stay (it had completed its cutover)\n",
      );
      for (const [table, key] of TABLES) {
        expect(await rowsAsText(suite.dbs, 'target', table, key)).toEqual(await rowsAsText(suite.dbs, 'source', table, key));
      }
      expect(await suite.dbs.query('target', `SELECT nspname FROM pg_namespace WHERE nspname = '_ferry'`)).toEqual([]);
      await expect(suite.dbs.exec('source', `UPDATE public.tags SET name = 'late' WHERE id = 1`)).rejects.toThrow(/frozen: Ferry migration history-completed moved it/);
    });
  });
}
