/**
 * Production's waits are what recorded production runs used: tests run with shorter ones
 * (test/helpers/stack.ts TEST_TIMINGS), so this is where the defaults are held to what Ferry did
 * before they became options. The histories are the recorded fixtures the replay suite replays.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PRODUCTION_TIMINGS, timingProblems, timingsOf } from '../../src/core/timings';

interface HistoryEvent {
  activityTaskScheduledEventAttributes?: {
    activityType?: { name?: string };
    heartbeatTimeout?: string;
    retryPolicy?: { initialInterval?: string; maximumInterval?: string; maximumAttempts?: number };
    input?: { payloads?: { data?: string }[] };
  };
}

const HISTORIES = join(__dirname, '..', 'fixtures', 'histories');

function scheduled(scenario: string, file: string) {
  const events = (JSON.parse(readFileSync(join(HISTORIES, scenario, file), 'utf8')) as { events: HistoryEvent[] }).events;
  return events.map((e) => e.activityTaskScheduledEventAttributes).filter((a) => a !== undefined);
}

const seconds = (ms: number) => `${ms / 1000}s`;

describe('the production timings', () => {
  it('are the heartbeat timeout every activity of a recorded online run was scheduled with', () => {
    const activities = ['migrationWorkflow-1.json', 'tableMigrationWorkflow-1.json'].flatMap((f) => scheduled('online-logical', f));
    expect(activities.length).toBeGreaterThan(10);
    expect([...new Set(activities.map((a) => a.heartbeatTimeout))]).toEqual([seconds(PRODUCTION_TIMINGS.heartbeatTimeoutMs)]);
  });

  it('are the retries of a recorded run\'s result callback', () => {
    const callbacks = scheduled('change-continued-as-new', 'changeWorkflow-1.json').filter((a) => a.activityType?.name === 'sendCallback');
    expect(callbacks.length).toBeGreaterThan(0);
    const { initialIntervalMs, maximumIntervalMs, maximumAttempts } = PRODUCTION_TIMINGS.callbackRetry;
    for (const c of callbacks) {
      expect(c.retryPolicy).toMatchObject({ initialInterval: seconds(initialIntervalMs), maximumInterval: seconds(maximumIntervalMs), maximumAttempts });
    }
  });

  it('are the slice a recorded backfill ran its activity calls for', () => {
    const slices = scheduled('change-continued-as-new', 'changeWorkflow-1.json').filter((a) => a.activityType?.name === 'backfillSlice');
    expect(slices.length).toBeGreaterThan(0);
    for (const s of slices) {
      const input = JSON.parse(Buffer.from(s.input!.payloads![0].data!, 'base64').toString('utf8')) as { sliceMs: number };
      expect(input.sliceMs).toBe(PRODUCTION_TIMINGS.backfillSliceMs);
    }
  });

  it('keep the re-check period and the idle cap the table workflow had as constants', () => {
    expect({ recheckMs: PRODUCTION_TIMINGS.recheckMs, maxIdleMs: PRODUCTION_TIMINGS.maxIdleMs }).toEqual({ recheckMs: 15_000, maxIdleMs: 30_000 });
  });

  it('give way to what a caller passes, field by field, and refuse values no run could keep up with', () => {
    expect(timingsOf({ heartbeatTimeoutMs: 8_000, callbackRetry: { maximumAttempts: 3 } })).toEqual({
      ...PRODUCTION_TIMINGS,
      heartbeatTimeoutMs: 8_000,
      callbackRetry: { ...PRODUCTION_TIMINGS.callbackRetry, maximumAttempts: 3 },
    });
    expect(timingsOf(undefined)).toEqual(PRODUCTION_TIMINGS);
    expect(timingProblems({ heartbeatTimeoutMs: 1_000, recheckMs: 2.5, callbackRetry: { maximumAttempts: 0 } })).toEqual([
      'timings.heartbeatTimeoutMs: 1000 is not a whole number of milliseconds ≥ 4000',
      'timings.recheckMs: 2.5 is not a whole number of milliseconds ≥ 1000',
      'timings.callbackRetry.maximumAttempts: 0 is not a whole number ≥ 1',
    ]);
  });
});
