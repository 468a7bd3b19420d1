/**
 * Ferry's events read back from the NATS JetStream stream (src/event-stream.ts): replay, then
 * live with `follow`. Needs only FERRY_NATS_URL (and its FERRY_SECRET_NATS_* credentials) in this
 * process's environment, not Temporal: a service that subscribes to events need not steer runs.
 */
import type { ReadOptions } from '../event-stream';
import type { StreamedEvent } from '../core/event-subjects';

export type { ReadOptions } from '../event-stream';
export type { StreamedEvent } from '../core/event-subjects';

/** The events `options` choose, in the stream's order; the connection closes when the loop ends. */
export async function* streamEvents(options: ReadOptions = {}, env: NodeJS.ProcessEnv = process.env): AsyncGenerator<StreamedEvent> {
  // Loaded on first use: the NATS client would slow every other command's start.
  const { connectNats, readEvents } = require('../event-stream') as typeof import('../event-stream');
  const nc = await connectNats(env, 'ferry-client');
  try {
    yield* readEvents(nc, options);
  } finally {
    await nc.close();
  }
}
