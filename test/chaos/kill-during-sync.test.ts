/**
 * SIGKILL the `ferry worker` that runs a table's sync while an online migration waits for
 * approval under live writers. A lock the test holds on the target table keeps the sync slice
 * in its apply (for less than its 5 s lock_timeout) so it is caught running; the test kills the
 * worker that runs it, notes the change-log entries waiting at that moment, and lets go. The
 * killed attempt must end in a heartbeat timeout and the next attempt of the same slice run on
 * the other worker, which resumes from the log — every entry waiting at the kill is consumed —
 * and after approval the target equals the source row for row (SQL on both databases).
 */
import { captureNames } from '../../src/db/capture-sql';
import { quoteQualified } from '../../src/core/identifiers';
import { runningActivities } from '../helpers/chaos';
import { awaitRetry, HeldLock, Killed, lastAttempt } from '../helpers/kills';
import { onlineSuite } from '../helpers/online-suite';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';

describe('a worker killed with SIGKILL during incremental sync', () => {
  const suite = onlineSuite({ name: 'killsync', accounts: 30000, workers: 0 });

  it('loses no change: the sync slice is retried on the surviving worker, which resumes from the change log', async () => {
    const { stack, dbs } = suite;
    const workers = [await stack.startWorkerProcessReady('w1'), await stack.startWorkerProcessReady('w2')];
    const { id } = await suite.start('kill-during-sync');
    const log = quoteQualified(captureNames(id, 0).log);
    const { result, writers } = await suite.underWriters(async () => {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      let killed: Killed;
      let waiting: string[];
      // The writers keep accounts' log filling; its next sync slice waits for this lock.
      const hold = await HeldLock.take(dbs.url('target'), 'accounts', ['LOCK TABLE public.accounts IN SHARE MODE']);
      try {
        // A slice that has read keys from the log and waits for the lock to apply them.
        const blocked = async () =>
          (
            await dbs.query<{ n: number }>(
              'target',
              `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'ferry-worker'
                 AND wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE "public"."accounts"%'`,
            )
          )[0].n > 0;
        const sync = await eventually(
          async () => (await blocked()) && (await runningActivities(stack.ferry, [`${id}/table-0`])).find((a) => a.activity === 'syncChanges' && a.heartbeating),
          30_000,
          50,
        );
        waiting = (await dbs.query<{ id: string }>('source', `SELECT id::text FROM ${log}`)).map((r) => r.id);
        const victim = workers.find((w) => w.identity === sync.worker)!;
        victim.process.kill('SIGKILL');
        await victim.exited;
        expect(victim.process.signalCode).toBe('SIGKILL');
        killed = { ...sync, at: Date.now() };
      } finally {
        await hold.release();
      }
      expect(waiting.length).toBeGreaterThan(0);
      const survivor = workers.find((w) => w.identity !== killed.worker)!;

      // Temporal notices the lost worker by the heartbeat timeout and retries the same slice.
      expect(await awaitRetry(stack.ferry, killed)).toEqual({ attempt: killed.attempt + 1, endedBy: 'heartbeat timeout' });
      // The survivor carries on from the log: every entry that waited at the kill is applied and gone.
      await eventually(async () => {
        const left = await dbs.query<{ n: number }>('source', `SELECT count(*)::int AS n FROM ${log} WHERE id = ANY ($1::int8[])`, [waiting]);
        return left[0].n === 0;
      }, 60_000);
      await eventually(async () => (await lastAttempt(stack.ferry, killed)).completed, 60_000);
      expect(await lastAttempt(stack.ferry, killed)).toEqual({ attempt: killed.attempt + 1, worker: survivor.identity, completed: true });

      await stack.ferry.approve(id);
      return resultWithin(stack.ferry, id, 120_000);
    });
    await suite.expectCompleted(result, writers);
  }, 300_000);
});
