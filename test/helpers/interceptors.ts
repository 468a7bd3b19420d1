/**
 * Fault injection through Temporal's own activity interceptors: run a hook with an activity's
 * input just before the real activity executes (on the real databases).
 */
import type { WorkerOptions } from '@temporalio/worker';

export function beforeActivity(activityType: string, hook: (input: unknown, attempt: number) => Promise<void>): WorkerOptions['interceptors'] {
  return {
    activity: [
      (ctx) => ({
        inbound: {
          async execute(input, next) {
            if (ctx.info.activityType === activityType) await hook(input.args[0], ctx.info.attempt);
            return next(input);
          },
        },
      }),
    ],
  };
}
