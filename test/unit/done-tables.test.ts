/**
 * What operators read of tables that are done, from the status document of a real online
 * migration (`ferry status --json` of `ferry demo --rows 20000`, kept after it succeeded:
 * test/fixtures/status/online-succeeded.json). Its tables keep the last lag reading taken before
 * the cutover's drain (shop.customers: 2 changes, 0.067 s), which once read as changes never
 * applied; and a watch that began after the copy printed a rate falling towards zero and
 * cli-progress's own ETA, NULL, where the ETA goes.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { stripVTControlCharacters } from 'node:util';
import { migrationDetails } from '../../src/core/details';
import { StatusDocument } from '../../src/core/status';
import { formatStatus } from '../../src/view/format';
import { doingText, watch } from '../../src/view/watch';

const succeeded = JSON.parse(readFileSync(join(__dirname, '../fixtures/status/online-succeeded.json'), 'utf8')) as StatusDocument;

/** The same migration as it stood before its approval: running, every table caught up and waiting for the cutover. */
function awaitingApproval(done: StatusDocument): StatusDocument {
  const approval = done.events.find((e) => e.type === 'ControlReceived')!;
  return {
    ...done,
    endedAt: undefined,
    cutover: undefined,
    timeline: undefined,
    state: 'RUNNING',
    phase: 'AWAITING_APPROVAL',
    tables: done.tables.map((t) => ({ ...t, phase: 'AWAITING_APPROVAL' })),
    events: done.events.filter((e) => e.seq < approval.seq),
    transitions: done.transitions.filter((t) => t.at < approval.at),
  };
}
const waiting = awaitingApproval(succeeded);

/** A stream that says it is a terminal, keeping what is written to it (cli-progress draws to it as to a TTY). */
class FakeTerminal extends Writable {
  readonly isTTY = true;
  readonly columns = 140;
  text = '';

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.text += chunk.toString();
    done();
  }
}

/**
 * Statuses served in turn (the last repeated), and a result that comes once the migration has
 * ended: as the status saying so is read, or (`early`) as the read before it is.
 */
function clientServing(docs: StatusDocument[], early = false) {
  let served = 0;
  let ended: () => void = () => undefined;
  const result = new Promise<void>((resolve) => (ended = resolve));
  return {
    status: async () => {
      const s = docs[Math.min(served, docs.length - 1)];
      served += 1;
      if (docs[Math.min(served - (early ? 0 : 1), docs.length - 1)].endedAt) ended();
      return s;
    },
    result: () => result as never,
  };
}

/** Each of the watch's lines for one table, without the terminal's control sequences. */
function linesOf(text: string, table: string): string[] {
  return stripVTControlCharacters(text)
    .split(/\r|\n/)
    .filter((l) => l.includes(` ${table} `) || l.startsWith(`${table} `));
}

describe('a table that is done', () => {
  it('`ferry status` shows its lag while it syncs and none once it is COMPLETED', () => {
    const tableLines = (s: StatusDocument) => formatStatus(s).split('\n').filter((l) => l.startsWith('  shop.'));
    expect(tableLines(waiting)).toEqual([
      '  shop.customers → shop.customers  AWAITING_APPROVAL  4000 / ~4000 rows (100%)  chunks 1/1  lag 2 changes, 0.067s',
      '  shop.orders → shop.orders  AWAITING_APPROVAL  20039 / ~20000 rows (100%)  chunks 1/1  lag 0 changes, 0s',
      '  shop.order_items → shop.order_items  AWAITING_APPROVAL  40047 / ~40000 rows (100%)  chunks 1/1  lag 0 changes, 0s',
    ]);
    expect(tableLines(succeeded)).toEqual([
      '  shop.customers → shop.customers  COMPLETED  4000 / ~4000 rows (100%)  chunks 1/1',
      '  shop.orders → shop.orders  COMPLETED  20039 / ~20000 rows (100%)  chunks 1/1',
      '  shop.order_items → shop.order_items  COMPLETED  40047 / ~40000 rows (100%)  chunks 1/1',
    ]);
  });

  it('the Web UI details leave its lag cell empty once it is COMPLETED', () => {
    const rows = (s: StatusDocument) => migrationDetails(s).split('\n').filter((l) => l.startsWith('| shop.'));
    expect(rows(waiting)).toEqual([
      '| shop.customers | AWAITING_APPROVAL | 4,000 / ~4,000 | 2 waiting (0.1 s) |',
      '| shop.orders | AWAITING_APPROVAL | 20,039 / ~20,000 | 0 waiting (0.0 s) |',
      '| shop.order_items | AWAITING_APPROVAL | 40,047 / ~40,000 | 0 waiting (0.0 s) |',
    ]);
    expect(rows(succeeded)).toEqual([
      '| shop.customers | COMPLETED | 4,000 / ~4,000 |  |',
      '| shop.orders | COMPLETED | 20,039 / ~20,000 |  |',
      '| shop.order_items | COMPLETED | 40,047 / ~40,000 |  |',
    ]);
  });

  it('a migration that ended without success shows no lag either: the last reading is not live', () => {
    const failed: StatusDocument = { ...waiting, state: 'FAILED', phase: 'FAILED', endedAt: '2026-12-07T01:01:20.000Z' };
    expect(formatStatus(failed)).not.toContain('lag');
    expect(migrationDetails(failed)).not.toContain('waiting (');
  });
});

describe('what `ferry watch` says a table is doing', () => {
  const copying: StatusDocument = { ...waiting, phase: 'FULL_MIGRATING', tables: [{ ...waiting.tables[1], phase: 'FULL_MIGRATING', rowsCopied: 5000 }] };
  const table = copying.tables[0];

  it('a rate while it copies (with an ETA once there is one) or syncs', () => {
    expect(doingText(copying, table, { rows: undefined })).toBe('… rows/s');
    expect(doingText(copying, table, { rows: 1500 })).toBe('1500 rows/s, ETA 10s');
    const syncing = { ...table, phase: 'INCR_SYNCING' as const };
    expect(doingText({ ...copying, phase: 'INCR_SYNCING' }, syncing, { rows: 0, changes: 12.4 })).toBe('12 changes/s');
    expect(doingText({ ...copying, phase: 'INCR_SYNCING' }, syncing, { rows: 0 })).toBe('… changes/s');
  });

  it('in words otherwise: no rate falling towards zero, no ETA', () => {
    const said = (phase: StatusDocument['tables'][number]['phase']) => doingText(copying, { ...table, phase }, { rows: 3, changes: 2 });
    expect(said('PENDING')).toBe('not started');
    expect(said('FULL_DONE')).toBe('copied');
    expect(said('VALIDATING')).toBe('comparing both sides');
    expect(said('AWAITING_APPROVAL')).toBe('caught up');
    expect(said('CUTTING_OVER')).toBe('applying the last changes');
    expect(said('COMPLETED')).toBe('done');
    expect(said('ROLLING_BACK')).toBe('rolling back');
    expect(said('FAILED')).toBe('failed');
    // Paused, a copy's rate would only fall; once the migration ended, a table left mid-way stopped.
    expect(doingText({ ...copying, paused: true }, table, { rows: 1500 })).toBe('paused');
    expect(doingText({ ...copying, state: 'CANCELLED', endedAt: '2026-12-07T01:01:20.000Z' }, table, { rows: 1500 })).toBe('stopped');
  });
});

describe('`ferry watch` of a migration whose copy ended before the watch began', () => {
  // Enough reads of the same rows that cli-progress's own ETA, given the chance, reads NULL (0/0 over its last ten).
  const polls = [...Array.from({ length: 14 }, () => waiting), succeeded];

  it('on a terminal: no NULL, no rate, no ETA; caught up with its lag, then done without one', async () => {
    const terminal = new FakeTerminal();
    await watch(clientServing(polls), succeeded.id, { tty: true, stream: terminal, intervalMs: 40 });
    const text = stripVTControlCharacters(terminal.text);
    expect(text).not.toMatch(/NULL|INF|NaN|ETA|rows\/s/);
    const customers = linesOf(terminal.text, 'shop.customers');
    // Drawn while it waited for approval, then the last drawing.
    expect(customers.filter((l) => /\| caught up \| AWAITING_APPROVAL lag 2 \(0\.1s\)\s*$/.test(l)).length).toBeGreaterThan(0);
    expect(customers[customers.length - 1]).toMatch(/^ shop\.customers +100% 4000\/4000 rows \|█+\| done \| COMPLETED\s*$/);
    expect(text).toContain(`${succeeded.id} · SUCCEEDED · COMPLETED`);
  });

  it('in plain lines: the same words, and no lag once done', async () => {
    const lines = new FakeTerminal();
    await watch(clientServing(polls), succeeded.id, { tty: false, stream: lines, intervalMs: 1 });
    expect(lines.text).not.toMatch(/NULL|ETA|rows\/s/);
    const customers = linesOf(lines.text, 'shop.customers');
    expect(customers[0]).toMatch(/ shop\.customers AWAITING_APPROVAL 4000\/~4000 caught up lag 2 \(0\.1s\) {2}shop\.orders /);
    expect(customers[customers.length - 1]).toMatch(/ shop\.customers COMPLETED 4000\/~4000 done {2}shop\.orders COMPLETED 20039\/~20000 done {2}shop\.order_items COMPLETED 40047\/~40000 done$/);
  });

  it('ended while its status was read: one read more, so that the last line is where it ended', async () => {
    const lines = new FakeTerminal();
    await watch(clientServing([waiting, waiting, succeeded], true), succeeded.id, { tty: false, stream: lines, intervalMs: 1 });
    const customers = linesOf(lines.text, 'shop.customers');
    expect(customers[customers.length - 1]).toMatch(/ · SUCCEEDED · COMPLETED +shop\.customers COMPLETED 4000\/~4000 done /);
  });
});
