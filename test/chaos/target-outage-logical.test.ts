/**
 * The target refuses every connection for 30 s (ALLOW_CONNECTIONS false and its sessions
 * terminated) while an online migration with capture: logical syncs under live writers, on a
 * private cluster with wal_level=logical. The consumer needs only the source: it keeps queueing
 * keys and confirming positions throughout, while the sync's slices fail and are retried. Once
 * the target is back the sync catches up, and after approval every table is equal row for row
 * (SQL on both databases) and no slot or publication is left.
 */
import { refuseConnections } from '../helpers/backends';
import { sleep } from '../helpers/chaos';
import { onlineSuite } from '../helpers/online-suite';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';

const OUTAGE_MS = 30_000;

describe('the target refusing connections while logical capture streams', () => {
  const suite = onlineSuite({ name: 'tgtlogical', accounts: 20000, logical: true });

  it('loses nothing: the consumer captures through the outage and the sync catches up afterwards', async () => {
    const { stack, dbs } = suite;
    const { id } = await suite.start('target-outage-logical');
    const { result, writers } = await suite.underWriters(async () => {
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
      const outage = await refuseConnections(dbs.names.target, suite.cluster!.url);
      const seen = new Set<string>();
      try {
        expect(outage.terminated).toBeGreaterThan(0);
        const atStart = await suite.confirmedLsn();
        const until = Date.now() + OUTAGE_MS;
        while (Date.now() < until) {
          for (const w of [id, `${id}/table-0`, `${id}/table-1`]) {
            const d = await stack.ferry.handle(w).describe().catch(() => undefined);
            for (const a of d?.raw.pendingActivities ?? []) if ((a.attempt ?? 1) > 1 && a.lastFailure?.message) seen.add(`${a.activityType?.name}: ${a.lastFailure.message}`);
          }
          await sleep(1000);
        }
        // The consumer went on while the target was gone.
        expect(await suite.lsnPast(await suite.confirmedLsn(), atStart)).toBe(true);
      } finally {
        await outage.restore();
      }
      // The sync met the refusal itself, and the consumer never failed.
      expect([...seen].some((m) => m.startsWith('syncChanges') && /not currently accepting connections/.test(m))).toBe(true);
      expect([...seen].filter((m) => m.startsWith('streamChanges'))).toEqual([]);
      await eventually(async () => (await stack.ferry.status(id)).phase === 'AWAITING_APPROVAL', 60_000);
      await stack.ferry.approve(id);
      return resultWithin(stack.ferry, id, 180_000);
    });
    await suite.expectCompleted(result, writers);
  }, 300_000);
});
