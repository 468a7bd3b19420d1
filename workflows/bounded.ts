/**
 * Bounded fan-out (samples-typescript batch-sliding-window): at most `limit` items in flight.
 * On the first failure it stops dispatching, cancels what is in flight, waits until all of it
 * has settled (acknowledged cancellation), then rethrows that first failure.
 */
import { CancellationScope } from '@temporalio/workflow';

export async function runBounded<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  const scope = new CancellationScope();
  const queue = [...items];
  let failure: { error: unknown } | undefined;
  const lane = async () => {
    while (queue.length > 0 && !failure) {
      const item = queue.shift()!;
      try {
        await fn(item);
      } catch (error) {
        if (!failure) {
          failure = { error };
          scope.cancel();
        }
      }
    }
  };
  await scope.run(() => Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane))).catch(() => undefined);
  if (failure) throw failure.error;
}
