/** The Web UI's current details of a migration, for each moment a person may look at it. */
import { detailsOrFault, endingMessage, migrationDetails, migrationStaticDetails } from '../../src/core/details';
import { parseSpec } from '../../src/core/spec';
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
        '',
        '\u00a0',
      ].join('\n'),
    );
  });

  it('past a hundred tables: those under way or failed listed, every table counted by phase', () => {
    const table = (i: number, phase: StatusDocument['tables'][number]['phase']) => ({ source: `t.t${i}`, target: `t.t${i}`, phase, rowsCopied: 0, rowsEstimated: 50, chunks: [] });
    const tables = Array.from({ length: 250 }, (_, i) => table(i, i < 200 ? 'COMPLETED' : 'PENDING'));
    tables[7] = table(7, 'FAILED');
    tables[210] = table(210, 'FULL_MIGRATING');
    const text = migrationDetails({ ...base, tables });
    expect(text).toContain('250 tables (199 COMPLETED, 1 FAILED, 49 PENDING, 1 FULL_MIGRATING); listed below: those neither waiting nor done');
    expect(text.split('\n').filter((line) => line.startsWith('| t.'))).toEqual(['| t.t7 | FAILED | 0 / ~50 |  |', '| t.t210 | FULL_MIGRATING | 0 / ~50 |  |']);
    // All of them under way: the first hundred.
    const busy = migrationDetails({ ...base, phase: 'AWAITING_APPROVAL', tables: Array.from({ length: 101 }, (_, i) => table(i, 'AWAITING_APPROVAL')) });
    expect(busy).toContain('101 tables (101 AWAITING_APPROVAL); listed below: the first 100 of those neither waiting nor done');
    expect(busy.split('\n').filter((line) => line.startsWith('| t.'))).toHaveLength(100);
    // Every one done: counted, no table of tables.
    const done = migrationDetails({ ...base, tables: Array.from({ length: 101 }, (_, i) => table(i, 'COMPLETED')) });
    expect(done).not.toContain('| table |');
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

  it('during a cutover blocked by a prepared transaction and by a session that hides its activity', () => {
    const text = migrationDetails({ ...base, phase: 'CUTTING_OVER' }, [
      { pid: 0, applicationName: '', user: 'app', xactAgeSeconds: 3.5, query: 'PREPARED TRANSACTION nightly-7', state: 'prepared' },
      { pid: 4243, applicationName: 'quiet', user: 'app', xactAgeSeconds: 0, query: '(track_activities is off in this session: its query and transaction start are not shown)', state: 'disabled' },
    ]);
    expect(text).toContain('- a prepared transaction (no application name, user app), open 3.5s: `PREPARED TRANSACTION nightly-7`');
    expect(text).toContain('- pid 4243 (quiet, user app), open 0s: `(track_activities is off');
  });

  it('a fault in rendering them is shown in their place, not thrown into the workflow task', () => {
    expect(detailsOrFault(() => 'fine')).toBe('fine');
    const shown = detailsOrFault(() => {
      throw new TypeError("Cannot read properties of null (reading 'replace')");
    });
    expect(shown).toContain("**These details could not be rendered** (the workflow goes on; `ferry status` shows it): `Cannot read properties of null (reading 'replace')`");
  });

  it('during a cutover with a switch: what the application\'s connections are doing, step by step', () => {
    const at = '2026-12-01T11:00:00.000Z';
    const detail = { switch: 'pgbouncer', database: 'app' };
    const cutting: StatusDocument = { ...base, phase: 'CUTTING_OVER', events: [{ seq: 1, type: 'SwitchPaused', at, detail: { ...detail, waitedMs: 12 } }] };
    expect(migrationDetails(cutting)).toContain(`**Switch:** PgBouncer's app paused at ${at}: the application's queries are held`);
    const repointed = { ...cutting, events: [...cutting.events, { seq: 2, type: 'SwitchRepointed' as const, at, detail: { ...detail, target: 'next' } }] };
    expect(migrationDetails(repointed)).toContain("**Switch:** PgBouncer's app points at the target (next); the queries are still held");
    const resumed = { ...repointed, events: [...repointed.events, { seq: 3, type: 'SwitchResumed' as const, at, detail: { ...detail, on: 'target', clientPauseMs: 1840 } }] };
    expect(migrationDetails(resumed)).toContain("**Switch:** PgBouncer's app resumed on the target after 1,840 ms");
    const reverted = { ...cutting, events: [...cutting.events, { seq: 2, type: 'SwitchResumed' as const, at, detail: { switch: 'webhook', on: 'source' } }] };
    expect(migrationDetails(reverted)).toContain('**Switch:** the webhook switcher resumed on the source (rolled back)');
    expect(migrationDetails(base)).not.toContain('**Switch:**');
  });

  it('where the events also go, once the workers publish them to the stream', () => {
    const streaming: StatusDocument = { ...base, eventStream: { stream: 'FERRY_EVENTS', subjects: 'ferry.migration.shop-move.<EventType>' } };
    expect(migrationDetails(streaming)).toContain('**Events:** NATS JetStream stream `FERRY_EVENTS`, subjects `ferry.migration.shop-move.<EventType>` (`ferry events` reads them)');
    expect(migrationDetails(base)).not.toContain('**Events:**');
  });

  it('at the end: the outcome with its figures', () => {
    const done = migrationDetails({
      ...base,
      state: 'SUCCEEDED',
      phase: 'COMPLETED',
      endedAt: '2026-12-01T10:05:00.000Z',
      cutover: { frozenAt: '2026-12-01T10:04:59.000Z', writeOutageMs: 640, dirtyRowsChecked: 12, afterwards: 'keep-frozen' },
    });
    expect(body(done).pop()).toBe('Outcome: **SUCCEEDED** · 12,000 rows · write outage 640 ms · 12 rows re-checked at cutover · source keep-frozen');
  });

  const failedAt = (state: StatusDocument['state'], extra: Partial<StatusDocument> = {}): StatusDocument => ({
    ...base,
    state,
    phase: 'FAILED',
    endedAt: '2026-12-01T10:05:00.000Z',
    transitions: [
      { machine: 'phase', from: 'PENDING', to: 'FULL_MIGRATING', at: '2026-12-01T10:00:01.000Z' },
      { machine: 'phase', from: 'FULL_MIGRATING', to: 'ROLLING_BACK', at: '2026-12-01T10:04:00.000Z' },
      { machine: 'phase', from: 'ROLLING_BACK', to: 'FAILED', at: '2026-12-01T10:04:59.000Z' },
    ],
    ...extra,
  });

  it('failed and rolled back: where it stopped, why (type, message, root cause) before the tables, and the way out', () => {
    const text = migrationDetails(
      failedAt('FAILED', {
        error: { message: 'copy public.customers chunk 0: PostgreSQL error 23514', type: 'PostgresError.23514', cause: 'new row for relation "customers" violates check constraint "v_positive"' },
        events: [{ seq: 1, type: 'RolledBack', at: '2026-12-01T10:04:59.000Z' }],
      }),
    );
    const lines = body(text);
    expect(lines[0]).toBe('**FAILED** · stopped in FULL_MIGRATING · rolled back');
    expect(lines[2]).toBe(
      '**Why:** `PostgresError.23514` copy public.customers chunk 0: PostgreSQL error 23514 — `new row for relation "customers" violates check constraint "v_positive"`',
    );
    expect(text).toContain('| public.customers | stopped in FULL_MIGRATING | 12,000 / ~25,000 |  |');
    expect(text).toContain('**Next:** fix the cause, then `ferry retry shop-move` starts it again (the rollback left nothing to resume from)');
    expect(lines.pop()).toBe('Outcome: **FAILED** · 12,000 rows');
  });

  it('failed with onFailure: keep: resume or clean up', () => {
    const text = migrationDetails(
      failedAt('FAILED', { error: { message: 'copy failed', type: 'PostgresError.22P02' }, warnings: ['onFailure: keep — target tables and checkpoints were left for inspection and `ferry retry`'] }),
    );
    expect(body(text)[0]).toBe('**FAILED** · stopped in FULL_MIGRATING · its work kept (onFailure: keep)');
    expect(text).toContain('**Next:** `ferry retry shop-move` resumes from the checkpoints it kept (onFailure: keep); `ferry cleanup shop-move` removes what it left');
  });

  it('failed in an online cutover with onFailure: keep: its work kept, though the freeze was undone (a RolledBack event)', () => {
    const text = migrationDetails(
      failedAt('FAILED', {
        error: { message: 'cutover failed', type: 'ConsistencyBreach' },
        events: [{ seq: 1, type: 'RolledBack', at: '2026-12-01T10:04:59.000Z' }],
        warnings: ['onFailure: keep — target tables, checkpoints and change capture were left: capture logs every write to the source tables'],
      }),
    );
    expect(body(text)[0]).toBe('**FAILED** · stopped in FULL_MIGRATING · its work kept (onFailure: keep)');
    expect(text).toContain('**Next:** `ferry retry shop-move` resumes from the checkpoints it kept (onFailure: keep)');
    expect(text).not.toContain('left nothing to resume from');
  });

  it('failed before anything was undone or kept: no promise of checkpoints', () => {
    const text = migrationDetails(failedAt('FAILED', { error: { message: 'preflight data changed', type: 'SchemaChanged' } }));
    expect(text).toContain('**Next:** fix the cause, then `ferry retry shop-move` starts it again; `ferry cleanup shop-move` removes anything it left');
    expect(text).not.toContain('resumes from the checkpoints');
  });

  it('timed out: says the deadline passed, where, and what was undone (or what failed to be)', () => {
    const text = migrationDetails(
      failedAt('TIMED_OUT', {
        error: { message: 'deadline reached before the migration finished', type: 'DeadlineExceeded' },
        events: [{ seq: 1, type: 'RolledBack', at: '2026-12-01T10:04:59.000Z', detail: { failedSteps: ['releaseSource'] } }],
      }),
    );
    expect(body(text)[0]).toBe('**TIMED_OUT** · the deadline passed before the migration finished · stopped in FULL_MIGRATING · rolled back, except: releaseSource');
    expect(text).toContain('**Why:** `DeadlineExceeded` deadline reached before the migration finished');
    expect(text).not.toContain('**Next:**');
  });

  it('ends with a blank paragraph, for the part of the frame Web UI 2.42.1 cuts off', () => {
    expect(migrationDetails(base).endsWith('\n\n\u00a0')).toBe(true);
  });
});

describe('the message a migration that did not succeed ends with (the top of its failure in the Web UI)', () => {
  const ended = (extra: Partial<StatusDocument>): StatusDocument => ({ ...base, phase: 'FAILED', endedAt: '2026-12-01T10:05:00.000Z', ...extra });

  it('failed: the root cause, PostgreSQL\'s words and SQLSTATE, then what the rollback undid', () => {
    const doc = ended({
      state: 'FAILED',
      error: { message: 'copy public.strict chunk 0: PostgreSQL error 23514', type: 'PostgresError.23514', cause: 'new row for relation "strict" violates check constraint "v_positive"' },
    });
    expect(endingMessage(doc, { undone: ['dropTargetObjects'], failedUndo: [], kept: false })).toBe(
      'copy public.strict chunk 0: PostgreSQL error 23514: new row for relation "strict" violates check constraint "v_positive"; rolled back: dropped what it created on the target',
    );
  });

  it('timed out: says so first, with the deadline, and what was undone or failed to be', () => {
    const doc = ended({ state: 'TIMED_OUT', error: { message: 'deadline reached before the migration finished', type: 'DeadlineExceeded' } });
    expect(endingMessage(doc, { deadlineMs: 3000, undone: ['openSource', 'removeCapture', 'dropTargetObjects'], failedUndo: [], kept: false })).toBe(
      'TIMED OUT: the deadline (3s) passed before the migration finished; rolled back: lifted the write freeze on the source, removed its change capture from the source, dropped what it created on the target',
    );
    expect(endingMessage(doc, { deadlineMs: 43_200_000, undone: ['releaseSource', 'dropTargetObjects'], failedUndo: ['releaseSource'], kept: false })).toBe(
      'TIMED OUT: the deadline (12h0m0s) passed before the migration finished; rolled back: dropped what it created on the target; rollback steps that failed: releaseSource (ferry cleanup shop-move finishes them)',
    );
  });

  it('cancelled, and failed with its work kept', () => {
    expect(endingMessage(ended({ state: 'CANCELLED', error: { message: 'not today (by ops)', type: 'Cancelled' } }), { undone: [], failedUndo: [], kept: false })).toBe(
      'CANCELLED: not today (by ops)',
    );
    expect(endingMessage(ended({ state: 'FAILED', error: { message: 'copy failed', type: 'PostgresError.22P02' } }), { undone: [], failedUndo: [], kept: true })).toBe(
      'copy failed; its work kept (onFailure: keep): ferry retry shop-move or ferry cleanup shop-move',
    );
  });
});

describe('the static details a migration starts with', () => {
  it('what it moves, and the commands that follow and steer it', () => {
    const spec = parseSpec({ source: 'old', target: 'new', mode: 'online', cutover: { approval: 'manual' }, tables: ['public.customers', { name: 'public.orders', target: 'archive.orders' }] });
    expect(body(migrationStaticDetails('shop-move', spec))).toEqual([
      '**online** migration of 2 table(s) from connection `old` to `new`',
      '',
      '- public.customers',
      '- public.orders → archive.orders',
      '',
      'Follow it: `ferry watch shop-move` · `ferry status shop-move` · stop it: `ferry cancel shop-move`',
      '',
      'The cutover waits for `ferry approve shop-move`.',
    ]);
    const many = parseSpec({ source: 'old', target: 'new', tables: Array.from({ length: 12 }, (_, i) => `public.t${i}`) });
    expect(migrationStaticDetails('m', many)).toContain('- public.t9\n- … and 2 more');
  });
});

/** The lines a person reads: without the blank paragraph at the end. */
function body(text: string): string[] {
  return text.replace(/\n\n\u00a0$/, '').split('\n');
}
