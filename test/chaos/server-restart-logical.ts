/**
 * The Temporal server goes away while logical capture's consumer streams under live writers
 * (private cluster with wal_level=logical): a dev server persisting to a SQLite file on a fixed
 * port is stopped and started again on the same port and file (`downMs` later: 6 s in `npm test`,
 * test/chaos/server-restart-logical.test.ts; 25 s in the soak tier, longer than the gRPC client's
 * own retries, test/soak/server-restart-logical.test.ts). The consumer
 * runs on its worker throughout — it needs the source, not Temporal — and keeps confirming
 * positions while the server is down; after approval the migration completes with every table
 * equal row for row (SQL on both databases) and no slot or publication left.
 */
import { sleep } from '../helpers/chaos';
import { onlineSuite } from '../helpers/online-suite';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';

export function serverRestartLogicalSuite({ downMs: DOWN_MS }: { downMs: number }): void {
  describe('a Temporal server restart while logical capture streams', () => {
    const suite = onlineSuite({ name: 'srvlogical', accounts: 20000, logical: true, workers: 0, restartableServer: true });

    it('loses nothing: the consumer keeps capturing through the outage and the migration completes', async () => {
      const { stack } = suite;
      await Promise.all([stack.startWorkerProcessReady('w1'), stack.startWorkerProcessReady('w2')]);
      const { id } = await suite.start('server-restart-logical');
      const { result, writers } = await suite.underWriters(async () => {
        await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
        await stack.stopServer();
        const down = await suite.confirmedLsn();
        // Temporal is gone; the consumer still confirms what the writers commit.
        await eventually(async () => suite.lsnPast(await suite.confirmedLsn(), down), DOWN_MS, 100);
        await sleep(DOWN_MS);
        await stack.startServer();
        const back = await suite.confirmedLsn();
        await eventually(async () => suite.lsnPast(await suite.confirmedLsn(), back), 60_000);
        await eventually(async () => (await stack.ferry.status(id)).phase === 'AWAITING_APPROVAL', 60_000);
        await stack.ferry.approve(id);
        return resultWithin(stack.ferry, id, 120_000);
      });
      await suite.expectCompleted(result, writers);
    }, 300_000 + DOWN_MS);
  });
}
