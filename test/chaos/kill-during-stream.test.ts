/**
 * SIGKILL the `ferry worker` that runs logical capture's consumer (streamChanges) while it
 * streams under live writers, on a private cluster with wal_level=logical. The killed attempt
 * must end in a heartbeat timeout and the next attempt run on the other worker, resuming from
 * the slot: its confirmed position moves past where it stood at the kill, every change made
 * while no consumer ran reaches the target, and after approval the target equals the source
 * row for row (SQL on both databases) and no slot or publication is left.
 */
import { runningActivities } from '../helpers/chaos';
import { awaitRetry, Killed } from '../helpers/kills';
import { onlineSuite } from '../helpers/online-suite';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';

describe('a worker killed with SIGKILL while logical capture streams', () => {
  const suite = onlineSuite({ name: 'killstream', accounts: 30000, logical: true, workers: 0 });

  it('loses no change: the consumer is retried on the surviving worker and resumes from the slot', async () => {
    const { stack, dbs } = suite;
    const workers = [await stack.startWorkerProcessReady('w1'), await stack.startWorkerProcessReady('w2')];
    const { id } = await suite.start('kill-during-stream');
    const { result, writers } = await suite.underWriters(async () => {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      const stream = await eventually(async () => (await runningActivities(stack.ferry, [id])).find((a) => a.activity === 'streamChanges' && a.heartbeating), 30_000, 50);
      const victim = workers.find((w) => w.identity === stream.worker)!;
      victim.process.kill('SIGKILL');
      await victim.exited;
      expect(victim.process.signalCode).toBe('SIGKILL');
      const killed: Killed = { ...stream, at: Date.now() };
      const atKill = await suite.confirmedLsn();
      expect(atKill).not.toBeNull();
      // Written while no consumer runs: only the slot holds these changes now.
      await dbs.exec('source', `INSERT INTO public.accounts VALUES (99999999, 1, 'written while the consumer was dead'); DELETE FROM public.accounts WHERE id = 29999;`);
      const survivor = workers.find((w) => w.identity !== killed.worker)!;

      expect(await awaitRetry(stack.ferry, killed)).toEqual({ attempt: killed.attempt + 1, endedBy: 'heartbeat timeout' });
      await eventually(async () => (await runningActivities(stack.ferry, [id])).find((a) => a.activity === 'streamChanges' && a.heartbeating && a.worker === survivor.identity), 60_000);
      // The survivor's consumer confirms positions past the one at the kill.
      await eventually(async () => suite.lsnPast(await suite.confirmedLsn(), atKill), 60_000);
      await eventually(async () => (await dbs.query('target', 'SELECT 1 FROM public.accounts WHERE id = 99999999')).length === 1, 60_000);
      // A consumer that runs again on its second attempt is not "retrying" in the status.
      await eventually(async () => (await stack.ferry.status(id)).state === 'RUNNING', 30_000);
      expect(await dbs.query('target', 'SELECT 1 FROM public.accounts WHERE id = 29999')).toEqual([]);

      await stack.ferry.approve(id);
      return resultWithin(stack.ferry, id, 120_000);
    });
    await suite.expectCompleted(result, writers);
  }, 300_000);
});
