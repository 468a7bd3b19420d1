/**
 * SIGKILL a `ferry worker` process while an online migration syncs under live writers. The
 * other worker picks up the table workflows and their activities; after approval the target
 * equals the source row for row (SQL on both databases).
 */
import { rowsAsText, TestDatabases } from '../helpers/databases';
import { eventually, resultWithin, TestStack, waitForPhase } from '../helpers/stack';
import { startWriters } from '../helpers/writers';

describe('a worker killed with SIGKILL during incremental sync', () => {
  let dbs: TestDatabases;
  let stack: TestStack;

  beforeAll(async () => {
    dbs = await TestDatabases.create('killsync', ['source', 'target']);
    await dbs.exec(
      'source',
      `CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12,2), note text);
       INSERT INTO public.accounts SELECT g, g / 10.0, 'seed ' || g FROM generate_series(1, 30000) g;
       CREATE TABLE public.items (a int, b text, v int NOT NULL, PRIMARY KEY (a, b));
       INSERT INTO public.items SELECT g % 40, 'k' || g, 0 FROM generate_series(1, 4000) g;
       ANALYZE;`,
    );
    stack = await TestStack.start({ connections: { live: dbs.url('source'), next: dbs.url('target') }, workers: 0 });
  });

  afterAll(async () => {
    await stack?.teardown();
    await dbs?.drop();
  });

  it('loses no change: the surviving worker carries the sync to a consistent cutover', async () => {
    const workers = [await stack.startWorkerProcessReady('w1'), await stack.startWorkerProcessReady('w2')];
    const { id } = await stack.ferry.start(
      { source: 'live', target: 'next', mode: 'online', cutover: { approval: 'manual', approvalTimeout: '10m' }, tables: ['public.accounts', 'public.items'] },
      { id: 'kill-during-sync' },
    );
    const writers = await startWriters(dbs.url('source'), 3);
    let result;
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      // Kill the worker that runs a table's sync right now (or the first one, if none is caught mid-slice).
      const running = await eventually(async () => {
        for (const table of [0, 1]) {
          const pending = (await stack.ferry.handle(`${id}/table-${table}`).describe()).raw.pendingActivities ?? [];
          const sync = pending.find((a) => a.activityType?.name === 'syncChanges' && a.lastWorkerIdentity);
          if (sync) return sync.lastWorkerIdentity!;
        }
        return undefined;
      }, 20_000).catch(() => 'w1');
      const victim = workers.find((w) => w.identity === running)!;
      victim.process.kill('SIGKILL');
      expect(await victim.exited).toBeNull();
      await new Promise((r) => setTimeout(r, 3000)); // writes go on while the other worker takes over
      await stack.ferry.approve(id);
      result = await resultWithin(stack.ferry, id, 120_000);
    } finally {
      await writers.stop();
    }
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');
    expect(writers.stats.otherErrors).toEqual([]);
    for (const [table, key] of [
      ['public.accounts', 'id'],
      ['public.items', 'a, b'],
    ]) {
      expect(await rowsAsText(dbs, 'target', table, key)).toEqual(await rowsAsText(dbs, 'source', table, key));
    }
  });
});
