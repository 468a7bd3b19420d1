/** What every activity receives from the worker (or from a test): dependencies go in, not up. */
import { ConnectionRegistry } from '../src/db/connections';
import { Logger } from '../src/logger';
import type { FerryMetrics } from '../src/telemetry';
import type { EventPublisher } from '../src/event-stream';

export interface ActivityDeps {
  connections: ConnectionRegistry;
  logger: Logger;
  /** Where secrets named by a spec (callback.secret) are looked up. */
  env: NodeJS.ProcessEnv;
  /**
   * The worker's Prometheus metrics: an activity counts what it did (rows copied, changes
   * applied, mismatches found) and what only it knows (a slot's lag). Absent in tests that need none.
   */
  metrics?: ActivityMetrics;
  /** The worker's publisher to the event stream (FERRY_NATS_URL); absent where none is configured. */
  events?: EventPublisher;
  /**
   * The activities the worker runs at once (DEFAULT_ACTIVITY_SLOTS when absent): the budget an
   * activity that works on several tables at once (the cutover's drain) shares with its peers.
   */
  activitySlots?: number;
}

/** A worker's activity slots unless `--concurrency` says otherwise. */
export const DEFAULT_ACTIVITY_SLOTS = 8;

export type ActivityMetrics = Pick<
  FerryMetrics,
  'rowsCopied' | 'bytesCopied' | 'batches' | 'changesApplied' | 'changeLag' | 'validationMismatches' | 'slotLagBytes' | 'slotLagSeconds' | 'callbacks'
>;

/** A table's metric label: its source name, schema-qualified and unquoted. */
export function tableLabel(table: { source: { schema: string; name: string } }): string {
  return `${table.source.schema}.${table.source.name}`;
}
