/**
 * Online validation on real databases, and what the sync's metrics say. Rows of the target are
 * altered behind Ferry's back while its live validation runs: the differences must be repaired
 * through the change log (their keys put back into it — read there — and applied by the sync,
 * never re-copied under it), or, when the damage keeps coming back, end in ConsistencyBreach and
 * a rollback. The worker's metrics (src/telemetry.ts, as `ferry worker --metrics-port` serves
 * them) are checked against the databases: ranges that differed, changes applied, and the change
 * log's length after each sync slice.
 */
import { captureNames } from '../../src/db/capture-sql';
import { quoteQualified } from '../../src/core/identifiers';
import { createMetrics, FerryMetrics } from '../../src/telemetry';
import { tableStateQuery } from '../../workflows/definitions';
import type { ValidateChunkInput } from '../../activities/validate-chunk';
import { objectInventory, rowsAsText } from '../helpers/databases';
import { activityStarts } from '../helpers/history';
import { aroundActivities } from '../helpers/interceptors';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const table = (name: string, rows: number) => `
CREATE TABLE public.${name} (id bigint PRIMARY KEY, v int NOT NULL, note text);
INSERT INTO public.${name} SELECT g, g, 'row ' || g FROM generate_series(1, ${rows}) g;`;

/** A metric's value for one table (0 when it has none yet), as /metrics would show it. */
async function metric(metrics: FerryMetrics, name: string, tableName: string): Promise<number> {
  const found = await metrics.registry.getSingleMetric(name)?.get();
  return found?.values.find((v) => v.labels.table === tableName)?.value ?? 0;
}

describe('online validation and the sync metrics', () => {
  const metrics = createMetrics();
  /** What to do to the target before a live validateChunk runs (per test). */
  let tamper: ((input: ValidateChunkInput) => Promise<void>) | undefined;
  /** The change log's keys right after enqueueKeys returned. */
  const enqueuedSeen: string[][] = [];
  /**
   * public.lagged's sync slices in order: the gauge as each began (what the previous completed
   * slice left in it), and the change log's length on the source as each completed.
   */
  const slices: ({ began: number } | { log: number })[] = [];

  const logOf = (migrationId: string, index = 0) => quoteQualified(captureNames(migrationId, index).log);

  const suite = stackSuite({
    name: 'onlrepair',
    databases: {
      source: `${table('repaired', 3000)} ${table('breached', 3000)} ${table('lagged', 2000)} ANALYZE;`,
      // public.lagged exists on the target already (an empty, compatible table); the test later
      // gives it a trigger that fires even for Ferry's replica-role writes and sleeps once: one
      // sync round that outlasts the 15 s slice.
      target: `CREATE TABLE public.lagged (id bigint PRIMARY KEY, v int NOT NULL, note text);
       CREATE TABLE public.slow_once (ms int);
       CREATE FUNCTION public.sleep_once() RETURNS trigger LANGUAGE plpgsql AS $$
       DECLARE wait int;
       BEGIN
         DELETE FROM public.slow_once RETURNING ms INTO wait;
         IF wait IS NOT NULL THEN PERFORM pg_catalog.pg_sleep(wait / 1000.0); END IF;
         RETURN NULL;
       END $$;`,
    },
    connections: { src: 'source', dst: 'target' },
    workers: 0,
    ready: async () => {
      await suite.stack.startWorker({
        metrics,
        interceptors: aroundActivities({
          validateChunk: { before: async (input) => (input as ValidateChunkInput).live && tamper?.(input as ValidateChunkInput) },
          enqueueKeys: {
            after: async (input) => {
              const { migrationId } = input as { migrationId: string };
              const rows = await suite.dbs.query<{ pk: string[] }>('source', `SELECT pk FROM ${logOf(migrationId)} ORDER BY id`);
              enqueuedSeen.push(...rows.map((r) => r.pk));
            },
          },
          syncChanges: {
            // Between two slices of a table no slice of it runs: the log holds still (no writers here).
            before: async (input) => {
              const { table: t } = input as { table: { source: { name: string } } };
              if (t.source.name === 'lagged') slices.push({ began: await metric(metrics, 'ferry_change_lag_pending', 'public.lagged') });
            },
            after: async (input) => {
              const { migrationId, table: t } = input as { migrationId: string; table: { source: { name: string } } };
              if (t.source.name !== 'lagged') return;
              slices.push({ log: (await suite.dbs.query<{ n: number }>('source', `SELECT count(*)::int AS n FROM ${logOf(migrationId)}`))[0].n });
            },
          },
        }),
      });
    },
  });

  beforeEach(() => {
    tamper = undefined;
  });

  it('repairs rows altered in the target during live validation through the change log, and counts the differing ranges', async () => {
    let tampered = false;
    tamper = async () => {
      if (tampered) return;
      tampered = true;
      // Three differences, far apart: each lands in its own leaf of the bisection (≤ 1000 rows).
      await suite.dbs.exec(
        'target',
        `UPDATE public.repaired SET v = -1 WHERE id = 1234;
         DELETE FROM public.repaired WHERE id = 77;
         INSERT INTO public.repaired VALUES (999999, 0, 'intruder');`,
      );
    };
    const { id } = await suite.stack.ferry.start(
      { source: 'src', target: 'dst', mode: 'online', tables: [{ name: 'public.repaired', chunks: 1 }], cutover: { approval: 'manual', approvalTimeout: '5m' } },
      { id: 'online-repaired' },
    );
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    expect(tampered).toBe(true);
    // Repaired before the approval: the target equals the source now, while capture runs.
    expect(await rowsAsText(suite.dbs, 'target', 'public.repaired', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.repaired', 'id'));
    // Through the log: the keys of the differing ranges (as either side has them) were put back
    // into the source's change log — the three altered among them, not the whole table ...
    const enqueued = new Set(enqueuedSeen.map((k) => k.join(',')));
    expect([...enqueued]).toEqual(expect.arrayContaining(['77', '1234', '999999']));
    expect(enqueued.size).toBeLessThan(3000);
    // ... and no range was copied again under the running sync.
    expect((await activityStarts(suite.stack.client, `${id}/table-0`)).map((s) => s.activityType)).not.toContain('repairRange');
    expect(await metric(metrics, 'ferry_validation_mismatches_total', 'public.repaired')).toBe(3);

    await suite.stack.ferry.approve(id);
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('SUCCEEDED');
    expect(result.events.find((e) => e.type === 'ValidationPassed')?.detail).toMatchObject({ live: true, repairedRanges: 3 });
    expect(await rowsAsText(suite.dbs, 'target', 'public.repaired', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.repaired', 'id'));
  });

  it('gives up with ConsistencyBreach online when the damage keeps coming back, and rolls both sides back', async () => {
    const before = { source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') };
    let rounds = 0;
    tamper = async (input) => {
      if (input.table.source.name !== 'breached') return;
      rounds += 1;
      await suite.dbs.exec('target', `UPDATE public.breached SET note = 'damaged again' WHERE id = 10`);
    };
    const { id } = await suite.stack.ferry.start(
      { source: 'src', target: 'dst', mode: 'online', tables: [{ name: 'public.breached', chunks: 1 }], cutover: { approval: 'manual', approvalTimeout: '5m' } },
      { id: 'online-breached' },
    );
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('ConsistencyBreach');
    expect(result.error?.message).toMatch(/public\.breached: 1 key range\(s\) still differ between source and target after 3 repair round\(s\)/);
    expect(rounds).toBe(4); // the first validation and three repairs
    expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['ConsistencyBreach', 'RollbackStarted', 'RolledBack']));
    expect(await objectInventory(suite.dbs, 'source')).toEqual(before.source);
    expect(await objectInventory(suite.dbs, 'target')).toEqual(before.target);
  });

  it('reports the change log left after each sync slice (ferry_change_lag_pending) and the changes applied, as the source has them', async () => {
    const { id } = await suite.stack.ferry.start(
      { source: 'src', target: 'dst', mode: 'online', tables: ['public.lagged'], cutover: { approval: 'manual', approvalTimeout: '5m' } },
      { id: 'online-lagged' },
    );
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    const appliedBefore = await metric(metrics, 'ferry_changes_applied_total', 'public.lagged');
    await suite.stack.ferry.pause(id);
    // The table itself must hold the pause (the parent forwards it): until then an idle table's
    // next look at its log can begin, and race the writes below (seen once in CI: a look that
    // found the log empty ended just as 500 changes landed).
    const table0 = suite.stack.ferry.handle(`${id}/table-0`);
    await eventually(
      async () =>
        (await table0.query(tableStateQuery)).paused === true &&
        !((await table0.describe()).raw.pendingActivities ?? []).some((a) => a.activityType?.name === 'syncChanges'),
    );
    const seen = slices.length;
    const logs = () => slices.slice(seen).flatMap((x) => ('log' in x ? [x.log] : []));

    // 500 changes; the round that applies them sleeps 15.3 s in the target's trigger — past the
    // slice's 15 s, inside the 20 s heartbeat timeout — and 500 more are made meanwhile: the slice
    // ends with them still in the log.
    await suite.dbs.exec('source', 'UPDATE public.lagged SET v = v + 1 WHERE id <= 500');
    // The slowing trigger fires on Ferry's own writes (ENABLE ALWAYS), which preflight refuses on
    // an online target: it is added once the migration runs.
    await suite.dbs.exec(
      'target',
      `CREATE TRIGGER sleep_once AFTER INSERT ON public.lagged FOR EACH STATEMENT EXECUTE FUNCTION public.sleep_once();
       ALTER TABLE public.lagged ENABLE ALWAYS TRIGGER sleep_once;
       INSERT INTO public.slow_once VALUES (15300);`,
    );
    await suite.stack.ferry.resume(id);
    // The resume ends the table's wait between looks at its log: the round that sleeps begins
    // at once. (Before control was numbered, a resume overtaken by the pause before it left the
    // table paused for good, in about half the runs of one afternoon.)
    await eventually(
      async () => (await suite.dbs.query('target', `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`)).length > 0,
      20_000,
    ).catch(async (err: Error) => {
      const child = await suite.stack.ferry.handle(`${id}/table-0`).describe();
      const state = await suite.stack.ferry.handle(`${id}/table-0`).query('tableState').catch((e: Error) => e.message);
      const status = await suite.stack.ferry.status(id);
      const events = ((await suite.stack.ferry.handle(`${id}/table-0`).fetchHistory()).events ?? []).slice(-14);
      const tail = events.map((e) => `${e.eventType}${e.activityTaskScheduledEventAttributes ? `:${e.activityTaskScheduledEventAttributes.activityType?.name}` : ''}${e.timerStartedEventAttributes ? `:${e.timerStartedEventAttributes.startToFireTimeout?.seconds}s` : ''}${e.workflowExecutionSignaledEventAttributes ? `:${e.workflowExecutionSignaledEventAttributes.signalName}` : ''}`);
      process.stderr.write(`child history tail: ${tail.join(' | ')}\n`);
      throw new Error(
        `${err.message}; slices since the pause: ${JSON.stringify(slices.slice(seen))}; parent paused ${status.paused}; child ${child.status.name} ` +
          `pending ${JSON.stringify((child.raw.pendingActivities ?? []).map((a) => [a.activityType?.name, a.state, a.attempt]))}; state ${JSON.stringify(state)}`,
      );
    });
    await suite.dbs.exec('source', 'UPDATE public.lagged SET v = v + 1 WHERE id > 1500');
    // Caught up again: a slice left 500 in the log, a later one none.
    await eventually(async () => logs().includes(500) && logs()[logs().length - 1] === 0, 60_000);
    // The gauge is read once more when a slice begins after the one that caught up. A caught-up
    // table's slices can be short (a look at an empty log), so look for such a slice in the
    // record rather than for a slice still running.
    const begunAfterCatchUp = () => {
      const since = slices.slice(seen);
      const caughtUp = since.findIndex((x, i) => 'log' in x && x.log === 0 && since.slice(0, i).some((y) => 'log' in y && y.log === 500));
      return caughtUp >= 0 && since.slice(caughtUp + 1).some((x) => 'began' in x);
    };
    // An idle table looks at its log at most every 30 s.
    await eventually(async () => begunAfterCatchUp(), 75_000).catch((err: Error) => {
      throw new Error(`${err.message}; slices since the pause: ${JSON.stringify(slices.slice(seen))}`);
    });

    // Each slice began with the gauge holding what the source's log held when the last one ended.
    let last: number | undefined;
    const differ: string[] = [];
    for (const x of slices) {
      if ('log' in x) last = x.log;
      else if (last !== undefined && x.began !== last) differ.push(`gauge ${x.began}, log ${last}`);
    }
    expect(differ).toEqual([]);
    expect(logs().filter((n) => n > 0)).toEqual([500]);
    // 1000 rows changed on the source, each applied once.
    expect((await metric(metrics, 'ferry_changes_applied_total', 'public.lagged')) - appliedBefore).toBe(1000);
    expect(await rowsAsText(suite.dbs, 'target', 'public.lagged', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.lagged', 'id'));

    await suite.stack.ferry.cancel(id, 'test over');
    expect((await resultWithin(suite.stack.ferry, id)).state).toBe('CANCELLED');
  }, 240_000);
});
