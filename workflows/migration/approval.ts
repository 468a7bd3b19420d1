/**
 * cutover.approval: event — while the migration waits for its approval, the workers read its
 * approval messages (`ferry.control.<id>.approve` on the NATS JetStream stream FERRY_CONTROL) in
 * slices (activities/events.ts awaitApproval): the first whose X-Ferry-Signature verifies with
 * the key of cutover.approvalSecret approves, as `ferry approve` does, with the actor and reason
 * it names; each one refused (a bad signature, a replayed one) is on record as a refused control
 * and a warning. The signal still approves too.
 */
import { CancellationScope, isCancellation, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { MigrationContext } from './context';

/** How long one read of the approval messages lasts before the workflow asks again. */
const SLICE_MS = 30_000;

const { awaitApproval } = proxyActivities<Activities>({
  startToCloseTimeout: SLICE_MS + 30_000,
  heartbeatTimeout: 20_000,
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 seconds' },
});

/** Starts listening; `stop` ends it once the wait is over (approved, failed or timed out). */
export function listenForApproval(ctx: MigrationContext): { stop(): Promise<void> } {
  const { id, spec, tracker } = ctx;
  const scope = new CancellationScope();
  const listening = scope
    .run(async () => {
      let afterSeq = 0;
      while (!ctx.approved()) {
        const read = await awaitApproval({ migrationId: id, secret: spec.cutover!.approvalSecret!, afterSeq, sliceMs: SLICE_MS });
        afterSeq = read.lastSeq;
        for (const refused of read.refused) {
          tracker.control('approve', 'waiting', 'refused', { ...(refused.actor ? { actor: refused.actor } : {}), reason: `refused: ${refused.why}` });
          tracker.warnings.push(`refused an approval message${refused.actor ? ` claiming to be from ${refused.actor}` : ''}: ${refused.why}`);
        }
        if (read.approved) ctx.approveBy(read.approved);
      }
    })
    .catch((err: unknown) => {
      if (!isCancellation(err)) tracker.warnings.push(`approval messages could not be read (\`ferry approve ${id}\` still approves): ${String(err)}`);
    });
  return {
    async stop() {
      scope.cancel();
      await listening;
    },
  };
}
