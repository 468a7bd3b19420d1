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

export interface ActivityHooks {
  /** With the activity's input, just before it executes. */
  before?: (input: unknown) => Promise<void>;
  /** With its input and result, right after it returned on the worker — before the workflow hears of it. */
  after?: (input: unknown, result: unknown) => Promise<void>;
}

/** Hooks around the activities of the given types (by type name). */
export function aroundActivities(hooks: Record<string, ActivityHooks>): WorkerOptions['interceptors'] {
  return {
    activity: [
      (ctx) => ({
        inbound: {
          async execute(input, next) {
            const hook = hooks[ctx.info.activityType];
            await hook?.before?.(input.args[0]);
            const result = await next(input);
            await hook?.after?.(input.args[0], result);
            return result;
          },
        },
      }),
    ],
  };
}

export interface HeldActivity {
  workflowId: string;
  activityType: string;
  attempt: number;
}

/**
 * Holds activities of an armed type before they run, until Temporal cancels them (or `maxMs`
 * passes, and then they run): a migration sits in that activity for as long as a test needs, and
 * the test knows when it got there.
 */
export class ActivityHold {
  private readonly armed = new Map<string, (held: HeldActivity) => void>();

  constructor(private readonly maxMs = 60_000) {}

  /** Holds the next activities of `type`; resolves when the first of them is held. */
  arm(type: string): Promise<HeldActivity> {
    return new Promise((resolve) => this.armed.set(type, resolve));
  }

  disarm(type: string): void {
    this.armed.delete(type);
  }

  interceptors(): WorkerOptions['interceptors'] {
    return {
      activity: [
        (ctx) => ({
          inbound: {
            execute: async (input, next) => {
              const held = this.armed.get(ctx.info.activityType);
              if (held) {
                held({ workflowId: ctx.info.workflowExecution?.workflowId ?? '', activityType: ctx.info.activityType, attempt: ctx.info.attempt });
                let timer: NodeJS.Timeout | undefined;
                // Heartbeats carry the cancellation to the worker (copyChunk and syncChanges get no
                // liveness heartbeats: they report progress themselves, which a held one makes none of).
                const beat = setInterval(() => ctx.heartbeat(), 1_000);
                try {
                  // Rejects with the cancellation, which ends the activity as cancelled.
                  await Promise.race([ctx.cancelled, new Promise((r) => (timer = setTimeout(r, this.maxMs)))]);
                } finally {
                  clearTimeout(timer);
                  clearInterval(beat);
                }
              }
              return next(input);
            },
          },
        }),
      ],
    };
  }
}
