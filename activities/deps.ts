/** What every activity receives from the worker (or from a test): dependencies go in, not up. */
import { ConnectionRegistry } from '../src/db/connections';
import { Logger } from '../src/logger';
import type { FerryMetrics } from '../src/telemetry';

export interface ActivityDeps {
  connections: ConnectionRegistry;
  logger: Logger;
  /** Where secrets named by a spec (callback.secret) are looked up. */
  env: NodeJS.ProcessEnv;
  /** The worker's Prometheus metrics, for what only a running activity knows (a slot's lag). */
  metrics?: Pick<FerryMetrics, 'slotLagBytes' | 'slotLagSeconds'>;
}
