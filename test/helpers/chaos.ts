/**
 * Chaos helpers: a seeded PRNG (so a failing trial can be replayed), a snapshot of what a
 * migration is doing and on which worker (taken just before a kill), and a row-for-row
 * comparison of a table on two databases that says what is missing, extra or duplicated.
 */
import { temporal } from '@temporalio/proto';
import type { FerryClient } from '../../src/client';
import { PREFLIGHT_WORKFLOW } from '../../src/core/names';
import { rowsAsText, TestDatabases } from './databases';

/** mulberry32: small, fast, and the same sequence for the same seed on every machine. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One seed per run, from FERRY_CHAOS_SEED or fresh; print it so a failing run can be repeated. */
export function chaosSeed(env: NodeJS.ProcessEnv = process.env): number {
  const given = env.FERRY_CHAOS_SEED;
  if (given !== undefined && given !== '') return Number(given) >>> 0;
  return Math.floor(Math.random() * 2 ** 32) >>> 0;
}

/** A trial's own seed, derived from the run's seed, so one trial can be rerun alone. */
export function trialSeed(seed: number, lane: string, trial: number): number {
  let h = seed ^ 0x9e3779b9;
  for (const c of `${lane}:${trial}`) h = Math.imul(h ^ c.charCodeAt(0), 0x85ebca6b) >>> 0;
  return (h ^ (h >>> 13)) >>> 0;
}

export interface RunningActivity {
  workflowId: string;
  activityId: string;
  activity: string;
  worker: string;
  attempt: number;
  /** Started, not asked to cancel, and heartbeated since this attempt started: it is running there now. */
  heartbeating: boolean;
}

export interface WorkSnapshot {
  /** The migration's phase, or PREFLIGHT while `ferry start` has not returned, or ENDED. */
  phase: string;
  tablePhases: string[];
  running: RunningActivity[];
}

const { PendingActivityState } = temporal.api.enums.v1;
/** Started, or started and asked to cancel: either way a worker is running it. */
const ON_A_WORKER = new Set([PendingActivityState.PENDING_ACTIVITY_STATE_STARTED, PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED]);

type Timestamp = { seconds?: { toString(): string } | number | null; nanos?: number | null } | null | undefined;
/** A proto timestamp in milliseconds (0 when absent). */
export const millis = (t: Timestamp): number => (t ? Number(String(t.seconds ?? 0)) * 1000 + Math.floor((t.nanos ?? 0) / 1e6) : 0);

/** Activities of these workflows that a worker is running now, and on which worker. */
async function runningIn(ferry: FerryClient, workflowIds: string[]): Promise<RunningActivity[]> {
  const running: RunningActivity[] = [];
  for (const workflowId of workflowIds) {
    const d = await ferry.handle(workflowId).describe().catch(() => undefined);
    for (const a of d?.raw.pendingActivities ?? []) {
      if (!a.state || !ON_A_WORKER.has(a.state) || !a.lastWorkerIdentity) continue;
      const started = millis(a.lastStartedTime);
      running.push({
        workflowId,
        activityId: a.activityId ?? '',
        activity: a.activityType?.name ?? '?',
        worker: a.lastWorkerIdentity,
        attempt: a.attempt ?? 1,
        heartbeating: a.state === PendingActivityState.PENDING_ACTIVITY_STATE_STARTED && started > 0 && millis(a.lastHeartbeatTime) >= started,
      });
    }
  }
  return running;
}

/** The preflight helper workflows `ferry start` runs for this migration, while they run. */
export async function preflightHelpers(ferry: FerryClient, migrationId: string): Promise<string[]> {
  const helpers: string[] = [];
  const query = `WorkflowType = '${PREFLIGHT_WORKFLOW}' AND ExecutionStatus = 'Running' AND TaskQueue = '${ferry.config.taskQueue}'`;
  for await (const w of ferry.client.workflow.list({ query })) if (w.workflowId.startsWith(`${migrationId}.preflight.`)) helpers.push(w.workflowId);
  return helpers;
}

/**
 * What the migration is doing right now and which worker runs each activity (best effort, a
 * few RPCs). Before `ferry start` has returned, that is the preflight helper workflow.
 */
export async function snapshotWork(ferry: FerryClient, migrationId: string, started: boolean): Promise<WorkSnapshot> {
  if (!started) return { phase: 'PREFLIGHT', tablePhases: [], running: await runningIn(ferry, await preflightHelpers(ferry, migrationId)) };
  const status = await ferry.status(migrationId);
  const children = status.tables.map((_, i) => `${migrationId}/table-${i}`);
  return {
    phase: status.endedAt ? `ENDED(${status.state})` : status.phase,
    tablePhases: status.tables.map((t) => t.phase),
    running: await runningIn(ferry, [migrationId, ...children]),
  };
}

/** Activities running now in these workflows (the migration, its tables, a preflight helper). */
export function runningActivities(ferry: FerryClient, workflowIds: string[]): Promise<RunningActivity[]> {
  return runningIn(ferry, workflowIds);
}

export interface TableComparison {
  table: string;
  sourceRows: number;
  targetRows: number;
  /** Target keys that appear more than once (impossible with the primary key in place). */
  duplicateKeys: number;
  missing: string[];
  extra: string[];
  equal: boolean;
}

/** Compares a table row for row (text form, ordered by key) between two databases. */
export async function compareTable(dbs: TestDatabases, source: string, target: string, table: string, key: string): Promise<TableComparison> {
  const [s, t] = await Promise.all([rowsAsText(dbs, source, table, key), rowsAsText(dbs, target, table, key)]);
  const [{ dup }] = await dbs.query<{ dup: number }>(
    target,
    `SELECT (count(*) - count(DISTINCT (${key})))::int AS dup FROM ${table}`,
  );
  const inTarget = new Set(t);
  const inSource = new Set(s);
  const missing = s.filter((r) => !inTarget.has(r));
  const extra = t.filter((r) => !inSource.has(r));
  const equal = s.length === t.length && s.every((r, i) => r === t[i]);
  return { table, sourceRows: s.length, targetRows: t.length, duplicateKeys: dup, missing: missing.slice(0, 5), extra: extra.slice(0, 5), equal };
}

/** Triggers on the source's tables, with the migration tag stripped (`ferry_freeze`, `ferry_capture`, …). */
export async function ferryTriggers(dbs: TestDatabases, role: string): Promise<string[]> {
  const rows = await dbs.query<{ t: string }>(
    role,
    `SELECT c.relname || ':' || regexp_replace(tgname, '_[0-9a-f]{12}$', '') AS t
       FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid WHERE NOT tgisinternal ORDER BY 1`,
  );
  return rows.map((r) => r.t);
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The chaos suites' ledger: `rows` rows under a bigint key, mixed types, ANALYZEd. */
export function ledgerSql(rows: number): string {
  return `CREATE TABLE public.ledger (id bigint PRIMARY KEY, account int NOT NULL, amount numeric(12,2), memo text, at timestamptz);
INSERT INTO public.ledger SELECT g, g % 977, (g % 10000) / 100.0, md5(g::text), '2024-01-01'::timestamptz + g * interval '1 second'
  FROM generate_series(1, ${rows}) g;
ANALYZE public.ledger;`;
}
