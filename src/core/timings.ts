/**
 * How long Ferry's workflows wait for things. Production runs with PRODUCTION_TIMINGS; a caller
 * may pass shorter ones in a workflow's options (`MigrationOptions.timings`,
 * `ChangeOptions.timings`) — the tests do, so that a killed worker's activity is retried in
 * seconds rather than twenty. Only what a caller gives travels in the workflow's input, so a
 * history of a run that gave none holds no timings at all. Pure module: workflows use it.
 */

export interface CallbackRetry {
  initialIntervalMs: number;
  maximumIntervalMs: number;
  maximumAttempts: number;
}

export interface Timings {
  /** An activity's heartbeat timeout: how soon the activity of a lost worker is retried elsewhere. */
  heartbeatTimeoutMs: number;
  /** Online: how often a ready table re-checks its dirty set row by row. */
  recheckMs: number;
  /** Online: the longest wait between an idle table's looks at its change log. */
  maxIdleMs: number;
  /** The result callback's and the event webhooks' retries (5xx, 429, network errors). */
  callbackRetry: CallbackRetry;
  /** Change plans: how long one backfill activity call runs before it returns its checkpoint. */
  backfillSliceMs: number;
}

export type TimingsInput = Partial<Omit<Timings, 'callbackRetry'>> & { callbackRetry?: Partial<CallbackRetry> };

export const PRODUCTION_TIMINGS: Timings = {
  // Workers send liveness heartbeats every 2 s (src/worker.ts): a lost worker costs seconds.
  heartbeatTimeoutMs: 20_000,
  recheckMs: 15_000,
  maxIdleMs: 30_000,
  callbackRetry: { initialIntervalMs: 1_000, maximumIntervalMs: 60_000, maximumAttempts: 8 },
  backfillSliceMs: 10_000,
};

/** The least each may be: below, heartbeats (every 2 s from the worker) or the databases could not keep up. */
const MINIMUM: Record<keyof Omit<Timings, 'callbackRetry'>, number> = {
  heartbeatTimeoutMs: 4_000,
  recheckMs: 1_000,
  maxIdleMs: 500,
  backfillSliceMs: 1_000,
};

/** Problems with given timings, each naming its field; empty when they can be used. */
export function timingProblems(given: TimingsInput | undefined): string[] {
  if (given === undefined) return [];
  const problems: string[] = [];
  for (const [field, least] of Object.entries(MINIMUM) as [keyof typeof MINIMUM, number][]) {
    const value = given[field];
    if (value !== undefined && !(Number.isInteger(value) && value >= least)) problems.push(`timings.${field}: ${String(value)} is not a whole number of milliseconds ≥ ${least}`);
  }
  const retry = given.callbackRetry ?? {};
  for (const [field, least] of [
    ['initialIntervalMs', 1],
    ['maximumIntervalMs', 1],
    ['maximumAttempts', 1],
  ] as const) {
    const value = retry[field];
    if (value !== undefined && !(Number.isInteger(value) && value >= least)) problems.push(`timings.callbackRetry.${field}: ${String(value)} is not a whole number ≥ ${least}`);
  }
  return problems;
}

/** The timings a run uses: the production ones, with what the caller gave over them. */
export function timingsOf(given: TimingsInput | undefined): Timings {
  return { ...PRODUCTION_TIMINGS, ...given, callbackRetry: { ...PRODUCTION_TIMINGS.callbackRetry, ...given?.callbackRetry } };
}
