/** Once per `jest` run, after every suite: stops the shared Temporal servers global-setup.ts started. */
import { SHARED_SERVERS_GLOBAL } from './global-setup';

export default async function globalTeardown(): Promise<void> {
  const stop = (globalThis as Record<string, unknown>)[SHARED_SERVERS_GLOBAL] as (() => Promise<void>) | undefined;
  await stop?.();
}
