/**
 * Bounded fan-out (samples-typescript batch-sliding-window): at most `limit` items in flight.
 * On the first failure it stops dispatching, cancels what is in flight, waits until all of it
 * has settled (acknowledged cancellation), then rethrows that first failure.
 */
import { CancellationScope, condition } from '@temporalio/workflow';

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

/**
 * Like runBounded, but an item takes `weight(item)` of `limit` (an item heavier than the limit
 * runs alone): items start in order while what is in flight leaves room for them. The same
 * failure handling: no more starts, what is in flight cancelled and awaited, the first failure
 * rethrown.
 */
export async function runWeighted<T>(items: T[], limit: number, weight: (item: T) => number, fn: (item: T) => Promise<void>): Promise<void> {
  const scope = new CancellationScope();
  let failure: { error: unknown } | undefined;
  let inFlight = 0;
  const running: Promise<void>[] = [];
  await scope.run(async () => {
    for (const item of items) {
      const w = weight(item);
      // Not cancellable: on a failure the loop stops here and still awaits what is in flight.
      await CancellationScope.nonCancellable(() => condition(() => failure !== undefined || inFlight === 0 || inFlight + w <= limit));
      if (failure) break;
      inFlight += w;
      running.push(
        fn(item)
          .catch((error: unknown) => {
            if (!failure) {
              failure = { error };
              scope.cancel();
            }
          })
          .finally(() => {
            inFlight -= w;
          }),
      );
    }
    await Promise.all(running);
  });
  if (failure) throw failure.error;
}
