/** Change plans: the spec's normal form and refusals, the step and phase machines, the lock backoff. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { parseChangePlan } from '../../src/core/change-plan';
import { CHANGE_PHASE_TRANSITIONS, CHANGE_PHASES, changePhaseMachine, STEP_STATES, STEP_TRANSITIONS, stepMachine } from '../../src/core/change-status';
import { SpecError } from '../../src/core/errors';
import { lockBackoffMs } from '../../workflows/change/lock-retry';
import { rewriteNames, rewriteTag } from '../../src/change/rewrite-sql';

const problems = (input: unknown): string[] => {
  try {
    parseChangePlan(input);
    return [];
  } catch (err) {
    return (err as SpecError).problems.map((p) => `${p.path}: ${p.message}`);
  }
};

describe('change plans', () => {
  it('normalises a plan: per-step defaults, durations in milliseconds, identifiers folded', () => {
    const plan = parseChangePlan({
      kind: 'change',
      database: 'app',
      timeout: '1h',
      steps: [
        { sql: 'ALTER TABLE s.t ADD COLUMN n text', onFailure: 'pause' },
        { backfill: { table: 'S.T', set: { N: "'x'" } } },
        { index: { table: 's.t', name: '"Idx"', columns: ['n'], unique: true } },
      ],
    });
    // A sql step's statement runs under a minute's statement_timeout unless it says otherwise, not under the step's hour.
    expect(plan.steps[0]).toMatchObject({ kind: 'sql', lockTimeoutMs: 2000, maxWaitMs: 600_000, statementTimeoutMs: 60_000, timeoutMs: 3_600_000, onFailure: 'pause' });
    expect(plan.steps[1]).toMatchObject({ kind: 'backfill', table: { schema: 's', name: 't' }, set: [{ column: 'n', expression: "'x'" }], batchRows: 5000, until: 'once', onFailure: 'rollback' });
    expect(plan.steps[2]).toMatchObject({ kind: 'index', name: 'Idx', unique: true, using: 'btree', rebuild: false });
  });

  it("caps a sql step's statementTimeout at the step's timeout", () => {
    const steps = [
      { sql: 'UPDATE s.t SET n = 1 WHERE id < 10', statementTimeout: '2h' },
      { sql: 'UPDATE s.t SET n = 1 WHERE id < 10', statementTimeout: '2h', timeout: '10m' },
    ];
    const plan = parseChangePlan({ kind: 'change', database: 'app', steps });
    expect(plan.steps.map((s) => (s.kind === 'sql' ? s.statementTimeoutMs : 0))).toEqual([7_200_000, 600_000]);
  });

  it('normalises a rewrite step: expressions per new column, approval auto and keepOld 24h by default', () => {
    const plan = parseChangePlan({
      kind: 'change',
      database: 'app',
      steps: [{ rewrite: { table: 'public.Accounts', alter: ['ALTER COLUMN abalance TYPE bigint'], columns: { ABalance: 'abalance::bigint' } } }],
    });
    expect(plan.steps[0]).toEqual({
      index: 0,
      kind: 'rewrite',
      table: { schema: 'public', name: 'accounts' },
      alter: ['ALTER COLUMN abalance TYPE bigint'],
      columns: [{ column: 'abalance', expression: 'abalance::bigint' }],
      approval: 'auto',
      keepOldMs: 86_400_000,
      lockTimeoutMs: 2000,
      maxWaitMs: 600_000,
      timeoutMs: 86_400_000,
      onFailure: 'rollback',
    });
  });

  it.each([
    [{ steps: [{ rewrite: { table: 's.t' } }] }, /steps\[0\]\.rewrite\.alter: is required/],
    [{ steps: [{ rewrite: { table: 's.t', alter: [] } }] }, /steps\[0\]\.rewrite\.alter: /],
    [{ steps: [{ rewrite: { table: 's.t', alter: ['x'], approval: 'maybe' } }] }, /steps\[0\]\.rewrite\.approval: /],
    [{ steps: [{ rewrite: { table: 's.t', alter: ['x'], keepOld: 'forever' } }] }, /steps\[0\]\.rewrite\.keepOld: must be a duration/],
    [{ steps: [{ rewrite: { table: 's.t', alter: ['x'], columns: { 'a b': '1' } } }] }, /steps\[0\]\.rewrite\.columns/],
  ])('refuses the rewrite %j', (plan, says) => {
    expect(problems({ kind: 'change', database: 'app', ...plan }).join('\n')).toMatch(says);
  });

  it.each([
    [{ steps: [{ shell: 'rm -rf /' }] }, /steps\[0\]: unknown step kind \("shell"\)/],
    [{ steps: [{ sql: 'x', backfill: {} }] }, /names several step kinds/],
    [{ steps: [{ sql: 'x', database: 'other' }] }, /steps\[0\]\.database: .*cannot name another/],
    [{ steps: [{ backfill: { table: 's.t', set: { n: '1' }, until: 'all' } }] }, /until: all needs a where/],
    [{ steps: [{ index: { table: 's.t', name: 'a b', columns: ['n'] } }] }, /index\.name: must be one identifier/],
    [{ steps: [{ index: { table: 's.t', name: 'i' } }] }, /columns: is required unless rebuild/],
    [{ steps: [{ sql: 'x', lockTimeout: '1h' }] }, /lockTimeout: must be between 100ms and 1m0s/],
    [{ steps: [] }, /steps: /],
  ])('refuses %j', (plan, says) => {
    expect(problems({ kind: 'change', database: 'app', ...plan }).join('\n')).toMatch(says);
  });

  it('steps and phases move only as their tables allow (every pair tried)', () => {
    for (const from of STEP_STATES) {
      for (const to of STEP_STATES) {
        const m = stepMachine();
        // Walk to `from` along legal moves first.
        const path: Record<string, string[]> = { PENDING: [], RUNNING: ['RUNNING'], SUCCEEDED: ['RUNNING', 'SUCCEEDED'], FAILED: ['RUNNING', 'FAILED'], SKIPPED: ['SKIPPED'], ROLLED_BACK: ['RUNNING', 'SUCCEEDED', 'ROLLED_BACK'] };
        for (const s of path[from]) m.to(s as never, 't');
        expect(m.can(to)).toBe(STEP_TRANSITIONS[from].includes(to));
      }
    }
    for (const from of CHANGE_PHASES) for (const to of CHANGE_PHASES) expect(CHANGE_PHASE_TRANSITIONS[from].includes(to)).toBe(changePhaseMachineAt(from).can(to));
  });

  it("names a rewrite's shadow and old table within PostgreSQL's 63 bytes, per change and step", () => {
    const tag = rewriteTag('accounts-bigint', 0);
    expect(tag).toMatch(/^[0-9a-f]{8}$/);
    expect(rewriteTag('accounts-bigint', 1)).not.toBe(tag);
    expect(rewriteNames({ schema: 'public', name: 'pgbench_accounts' }, tag)).toEqual({
      shadow: { schema: 'public', name: `pgbench_accounts_ferry_new_${tag}` },
      old: { schema: 'public', name: `pgbench_accounts_ferry_old_${tag}` },
      indexPrefix: `ferry_new_${tag}_`,
    });
    const long = rewriteNames({ schema: 's', name: 'ä'.repeat(40) }, tag);
    expect(Buffer.byteLength(long.shadow.name)).toBeLessThanOrEqual(63);
    expect(long.shadow.name.endsWith(`_ferry_new_${tag}`)).toBe(true);
  });

  it('waits between lock attempts 0.5 s doubling to 30 s, jittered by 0.5–1.5', () => {
    expect([1, 2, 3, 7, 20].map((n) => lockBackoffMs(n, 0.5))).toEqual([500, 1000, 2000, 30_000, 30_000]);
    expect(lockBackoffMs(1, 0)).toBe(250);
    expect(lockBackoffMs(1, 0.999)).toBeLessThanOrEqual(750);
  });
});

function changePhaseMachineAt(state: (typeof CHANGE_PHASES)[number]) {
  const m = changePhaseMachine();
  const path: Record<string, string[]> = {
    PENDING: [],
    APPLYING: ['APPLYING'],
    AWAITING_RESUME: ['APPLYING', 'AWAITING_RESUME'],
    ROLLING_BACK: ['APPLYING', 'ROLLING_BACK'],
    COMPLETED: ['APPLYING', 'COMPLETED'],
    FAILED: ['FAILED'],
  };
  for (const s of path[state]) m.to(s as never, 't');
  return m;
}

describe('the SQL parser change plans are judged with', () => {
  it('is loaded on first use, not by a worker loading its activities (its WebAssembly reserves about 130 MB)', () => {
    // A process of its own, from the compiled build the jest set-up made: whether the parser's
    // module is loaded, and what the process reserves, before and after the first parse.
    const script = `
      const external = () => Math.round(process.memoryUsage().external / 1048576);
      const loaded = () => Object.keys(require.cache).some((path) => path.includes('/libpg-query/'));
      require('./dist/activities');
      (async () => {
        const before = external();
        const loadedBefore = loaded();
        const parsed = await require('./dist/src/change/statements').parseStatements('ALTER TABLE t ADD COLUMN n int');
        console.log(JSON.stringify({ before, loadedBefore, after: external(), parsed: Array.isArray(parsed) }));
      })();`;
    const out = execFileSync(process.execPath, ['-e', script], { cwd: join(__dirname, '..', '..'), encoding: 'utf8' });
    const { before, loadedBefore, after, parsed } = JSON.parse(out.trim().split('\n').at(-1)!) as { before: number; loadedBefore: boolean; after: number; parsed: boolean };
    expect(parsed).toBe(true);
    expect(loadedBefore).toBe(false);
    expect(before).toBeLessThan(40);
    expect(after).toBeGreaterThan(before + 64);
  });
});
