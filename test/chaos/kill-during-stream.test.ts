/**
 * SIGKILL the `ferry worker` that runs logical capture's consumer (streamChanges) while it
 * streams under live writers, on a private cluster with wal_level=logical. The killed attempt
 * must end in a heartbeat timeout and the next attempt run on the other worker, resuming from
 * the slot: its confirmed position moves past where it stood at the kill, every change made
 * while no consumer ran reaches the target, and after approval the target equals the source
 * row for row (SQL on both databases) and no slot or publication is left.
 */
import { runningActivities } from '../helpers/chaos';
import { rowsAsText, TestDatabases } from '../helpers/databases';
import { awaitRetry, Killed } from '../helpers/kills';
import { LogicalCluster, startLogicalCluster } from '../helpers/logical-cluster';
import { eventually, resultWithin, TestStack, waitForPhase } from '../helpers/stack';
import { startWriters } from '../helpers/writers';

describe('a worker killed with SIGKILL while logical capture streams', () => {
  let cluster: LogicalCluster;
  let dbs: TestDatabases;
  let stack: TestStack;

  beforeAll(async () => {
    cluster = await startLogicalCluster();
    dbs = await TestDatabases.create('killstream', ['source', 'target'], cluster.url);
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
    await cluster?.stop();
  });

  it('loses no change: the consumer is retried on the surviving worker and resumes from the slot', async () => {
    const workers = [await stack.startWorkerProcessReady('w1'), await stack.startWorkerProcessReady('w2')];
    const { id } = await stack.ferry.start(
      {
        source: 'live',
        target: 'next',
        mode: 'online',
        capture: 'logical',
        cutover: { approval: 'manual', approvalTimeout: '10m' },
        tables: ['public.accounts', 'public.items'],
      },
      { id: 'kill-during-stream' },
    );
    const writers = await startWriters(dbs.url('source'), 3);
    const confirmed = async () => (await dbs.query<{ lsn: string | null }>('source', 'SELECT confirmed_lsn::text AS lsn FROM _ferry_capture.slots'))[0]?.lsn ?? null;
    let result;
    let killed: Killed;
    try {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      const stream = await eventually(async () => (await runningActivities(stack.ferry, [id])).find((a) => a.activity === 'streamChanges' && a.heartbeating), 30_000, 50);
      const victim = workers.find((w) => w.identity === stream.worker)!;
      victim.process.kill('SIGKILL');
      expect(await victim.exited).toBeNull();
      killed = { ...stream, at: Date.now() };
      const atKill = await confirmed();
      expect(atKill).not.toBeNull();
      // Written while no consumer runs: only the slot holds these changes now.
      await dbs.exec('source', `INSERT INTO public.accounts VALUES (99999999, 1, 'written while the consumer was dead'); DELETE FROM public.accounts WHERE id = 29999;`);
      const survivor = workers.find((w) => w.identity !== killed.worker)!;

      expect(await awaitRetry(stack.ferry, killed)).toEqual({ attempt: killed.attempt + 1, endedBy: 'heartbeat timeout' });
      await eventually(async () => (await runningActivities(stack.ferry, [id])).find((a) => a.activity === 'streamChanges' && a.heartbeating && a.worker === survivor.identity), 60_000);
      // The survivor's consumer confirms positions past the one at the kill.
      await eventually(async () => {
        const now = await confirmed();
        return now !== null && (await dbs.query<{ past: boolean }>('source', 'SELECT $1::pg_lsn > $2::pg_lsn AS past', [now, atKill]))[0].past;
      }, 60_000);
      await eventually(async () => (await dbs.query('target', 'SELECT 1 FROM public.accounts WHERE id = 99999999')).length === 1, 60_000);
      // A consumer that runs again on its second attempt is not "retrying" in the status.
      await eventually(async () => (await stack.ferry.status(id)).state === 'RUNNING', 30_000);
      expect(await dbs.query('target', 'SELECT 1 FROM public.accounts WHERE id = 29999')).toEqual([]);

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
    expect(await dbs.query('source', 'SELECT slot_name FROM pg_replication_slots')).toEqual([]);
    expect(await dbs.query('source', 'SELECT pubname FROM pg_publication')).toEqual([]);
  }, 300_000);
});
