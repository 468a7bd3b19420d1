/**
 * Kills that land, and the proof that they were survived the way docs/reliability.md says: SIGKILL the
 * worker that runs a given activity while it runs (STARTED, heartbeating in its current
 * attempt), then read from Temporal that the killed attempt ended in a heartbeat timeout and a
 * later attempt of the same activity ran to completion on another worker.
 */
import { temporal } from '@temporalio/proto';
import { Client as PgClient } from 'pg';
import type { FerryClient } from '../../src/client';
import { RunningActivity } from './chaos';
import { eventually } from './stack';

const { TimeoutType } = temporal.api.enums.v1;

export interface Killed extends RunningActivity {
  /** When the SIGKILL was sent. */
  at: number;
}

export interface Retry {
  /** The attempt that followed the killed one. */
  attempt: number;
  /** How Temporal ended the killed attempt, as the next attempt's lastFailure says. */
  endedBy: string;
}

/** A failure's kind as Temporal records it: "heartbeat timeout", "start-to-close timeout", or its message. */
function failureKind(failure: temporal.api.failure.v1.IFailure | null | undefined): string {
  if (!failure) return 'no failure';
  const timeout = failure.timeoutFailureInfo?.timeoutType;
  if (timeout === TimeoutType.TIMEOUT_TYPE_HEARTBEAT) return 'heartbeat timeout';
  if (timeout !== undefined && timeout !== null) return `${TimeoutType[timeout]} timeout`;
  return failure.message ?? 'a failure';
}

/** The activity's scheduling and its last start, from the workflow's history. */
async function historyOf(ferry: FerryClient, workflowId: string, activityId: string) {
  const history = await ferry.handle(workflowId).fetchHistory();
  let scheduledId: string | undefined;
  let started: temporal.api.history.v1.IActivityTaskStartedEventAttributes | undefined;
  let completed = false;
  for (const e of history.events ?? []) {
    if (e.activityTaskScheduledEventAttributes?.activityId === activityId) scheduledId = String(e.eventId);
    if (scheduledId && String(e.activityTaskStartedEventAttributes?.scheduledEventId) === scheduledId) started = e.activityTaskStartedEventAttributes!;
    if (scheduledId && String(e.activityTaskCompletedEventAttributes?.scheduledEventId) === scheduledId) completed = true;
  }
  return { started, completed };
}

/**
 * Whether the attempt a kill aimed at had already completed: its last report can reach the
 * server between the look that found it running and the SIGKILL (an awaitWriters slice ends as
 * soon as one of the sessions it waits for ends). Read once the worker has exited, before the
 * hold that kept the activity busy is released, so that a kill that missed can aim again.
 */
export async function finishedBeforeKill(ferry: FerryClient, aimed: RunningActivity): Promise<boolean> {
  const { started, completed } = await historyOf(ferry, aimed.workflowId, aimed.activityId);
  return completed && (started?.attempt ?? 1) === aimed.attempt;
}

/**
 * Waits until Temporal has given the killed activity its next attempt, and says how the killed
 * one ended. Watches the pending activity (the next attempt shows there with the killed one's
 * failure for at least the retry's backoff), and falls back to the history when the next attempt
 * was quicker than a look.
 */
export async function awaitRetry(ferry: FerryClient, killed: Killed, timeoutMs = 120_000): Promise<Retry> {
  return eventually(async () => {
    const d = await ferry.handle(killed.workflowId).describe();
    const pending = (d.raw.pendingActivities ?? []).find((a) => a.activityId === killed.activityId);
    if (pending) {
      const attempt = pending.attempt ?? 1;
      if (attempt === killed.attempt) return undefined; // the heartbeat timeout has not fired yet
      if (attempt === killed.attempt + 1) return { attempt, endedBy: failureKind(pending.lastFailure) };
      throw new Error(`${killed.activity} ${killed.activityId} went from attempt ${killed.attempt} to ${attempt} between two looks`);
    }
    const { started } = await historyOf(ferry, killed.workflowId, killed.activityId);
    if (!started) return undefined;
    const attempt = started.attempt ?? 1;
    if (attempt <= killed.attempt) throw new Error(`${killed.activity} ${killed.activityId}: attempt ${attempt} finished, the one killed (${killed.attempt}) was not retried`);
    if (attempt === killed.attempt + 1) return { attempt, endedBy: failureKind(started.lastFailure) };
    throw new Error(`${killed.activity} ${killed.activityId} went from attempt ${killed.attempt} to ${attempt} between two looks`);
  }, timeoutMs, 150);
}

/** After the workflow went on: which worker ran the activity's last attempt, and whether it completed. */
export async function lastAttempt(ferry: FerryClient, killed: Killed): Promise<{ attempt: number; worker: string; completed: boolean }> {
  const { started, completed } = await historyOf(ferry, killed.workflowId, killed.activityId);
  return { attempt: started?.attempt ?? 0, worker: started?.identity ?? '', completed };
}

/**
 * A session that holds a lock (or an open write) on a database until released: what keeps an
 * activity waiting — and visibly running — long enough to kill the worker that runs it.
 */
export class HeldLock {
  private constructor(
    private readonly client: PgClient,
    readonly label: string,
  ) {}

  /** BEGIN, then `statements` — the transaction stays open until release(). */
  static async take(url: string, label: string, statements: string[]): Promise<HeldLock> {
    const client = new PgClient({ connectionString: url, application_name: 'ferry-test-hold' });
    await client.connect();
    client.on('error', () => undefined);
    await client.query('BEGIN');
    for (const sql of statements) await client.query(sql);
    return new HeldLock(client, label);
  }

  /**
   * BEGIN, then `statements` as soon as `ready` (a boolean SQL expression, its values written in)
   * holds: checked every millisecond inside the server, so that the lock lands within a
   * millisecond of the moment (a client polling over the network and then connecting can be
   * tens of milliseconds late on a loaded machine, and miss a step that starts at that moment).
   * Undefined when `stopped()` says so first.
   */
  static async takeWhen(url: string, label: string, ready: string, statements: string[], stopped: () => boolean): Promise<HeldLock | undefined> {
    const client = new PgClient({ connectionString: url, application_name: 'ferry-test-hold' });
    await client.connect();
    client.on('error', () => undefined);
    const held = new HeldLock(client, label);
    await client.query('BEGIN');
    const run = statements.map((sql) => `EXECUTE ${client.escapeLiteral(sql)};`).join(' ');
    // Rounds of a second, so that a stop is heard; each check reads the newest commits (a
    // statement of a DO block takes a new snapshot under READ COMMITTED) — rows, not names:
    // to_regclass in `ready` kept answering for a table created after the round began as if it
    // were not there, so `ready` should find relations in pg_class instead.
    const round = `DO $hold$ BEGIN
      FOR i IN 1..1000 LOOP
        IF (${ready}) THEN ${run} PERFORM set_config('ferry_test.held', 'yes', true); RETURN; END IF;
        PERFORM pg_sleep(0.001);
      END LOOP;
    END $hold$`;
    while (!stopped()) {
      const ok = await client.query(round).then(
        () => true,
        // Not yet answerable (a relation `ready` reads is not there yet): a new transaction.
        async () => {
          await client.query('ROLLBACK');
          await new Promise((r) => setTimeout(r, 5));
          await client.query('BEGIN');
          return false;
        },
      );
      if (!ok) continue;
      const { rows } = await client.query(`SELECT current_setting('ferry_test.held', true) = 'yes' AS held`);
      if (rows[0].held) return held;
    }
    await held.release();
    return undefined;
  }

  /** Ends the transaction: COMMIT (an open write that must land) or ROLLBACK. */
  async release(commit = false): Promise<void> {
    await this.client.query(commit ? 'COMMIT' : 'ROLLBACK').catch(() => undefined);
    await this.client.end().catch(() => undefined);
  }
}
