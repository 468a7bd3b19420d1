/** The Web UI's current details of a migration, for each moment a person may look at it. */
import { migrationDetails } from '../../src/core/details';
import { StatusDocument } from '../../src/core/status';

const base: StatusDocument = {
  id: 'shop-move',
  runId: 'r1',
  state: 'RUNNING',
  phase: 'FULL_MIGRATING',
  paused: false,
  tables: [
    { source: 'public.customers', target: 'public.customers', phase: 'FULL_MIGRATING', rowsCopied: 12000, rowsEstimated: 25000, chunks: [] },
    { source: 'public.orders', target: 'archive.orders', phase: 'PENDING', rowsCopied: 0, rowsEstimated: 1000000, chunks: [] },
  ],
  events: [],
  transitions: [],
  startedAt: '2026-12-01T10:00:00.000Z',
};

describe('current details (markdown for the Web UI)', () => {
  it('while copying: the state, and a table of the tables with their rows', () => {
    expect(migrationDetails(base)).toBe(
      [
        '**RUNNING** · FULL_MIGRATING',
        '',
        '| table | phase | rows | lag |',
        '| --- | --- | ---: | --- |',
        '| public.customers | FULL_MIGRATING | 12,000 / ~25,000 |  |',
        '| public.orders → archive.orders | PENDING | 0 / ~1,000,000 |  |',
      ].join('\n'),
    );
  });

  it('waiting for approval or paused: what to do next, with the command', () => {
    const waiting = migrationDetails({ ...base, phase: 'AWAITING_APPROVAL', tables: [{ ...base.tables[0], phase: 'AWAITING_APPROVAL', lag: { pendingChanges: 3, seconds: 0.4, changesApplied: 90 } }] });
    expect(waiting).toContain('| public.customers | AWAITING_APPROVAL | 12,000 / ~25,000 | 3 waiting (0.4 s) |');
    expect(waiting).toContain('**Next:** waiting for approval: `ferry approve shop-move` starts the cutover');
    expect(migrationDetails({ ...base, paused: true })).toContain('**Next:** paused: `ferry resume shop-move` goes on');
  });

  it('during a blocked cutover: who blocks it', () => {
    const text = migrationDetails({ ...base, phase: 'CUTTING_OVER' }, [
      { pid: 4242, applicationName: 'batch-job', user: 'app', xactAgeSeconds: 20, query: 'UPDATE public.customers SET `x`', state: 'idle in transaction' },
    ]);
    expect(text).toContain('**The cutover waits for these write transactions, begun before the freeze:**\n- pid 4242 (batch-job, user app), open 20s: `UPDATE public.customers SET \'x\'`');
  });

  it('at the end: the outcome with its figures, or the error and the way out', () => {
    const done = migrationDetails({
      ...base,
      state: 'SUCCEEDED',
      phase: 'COMPLETED',
      endedAt: '2026-12-01T10:05:00.000Z',
      cutover: { frozenAt: '2026-12-01T10:04:59.000Z', writeOutageMs: 640, dirtyRowsChecked: 12, afterwards: 'keep-frozen' },
    });
    expect(done.split('\n').pop()).toBe('Outcome: **SUCCEEDED** · 12,000 rows · write outage 640 ms · 12 rows re-checked at cutover · source keep-frozen');
    const failed = migrationDetails({ ...base, state: 'FAILED', phase: 'FAILED', endedAt: '2026-12-01T10:05:00.000Z', error: { message: 'copy failed', type: 'PostgresError.22P02' } });
    expect(failed).toContain('**Next:** `ferry retry shop-move` resumes from the checkpoints');
    expect(failed.split('\n').pop()).toBe('Outcome: **FAILED** · 12,000 rows · PostgresError.22P02: copy failed');
  });
});
