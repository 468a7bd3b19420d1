/**
 * Live progress for `ferry watch ID` and `ferry start --wait`: a header (id, state, phase, time
 * since the start) and one bar per table (source → target, rows, what it is doing, phase, lag) on
 * a terminal; plain timestamped lines when the output is not one; NDJSON with --json. A table
 * that copies shows its rows per second and, once that rate is known, an ETA; one that catches
 * up on changes shows changes per second; any other says in words what it is doing (a rate
 * there would only fall towards zero). Rates come from a sliding window over the figures the
 * status reads (the tables' live progress: at most a few seconds old), so a copy under a cap of
 * 500 rows/s reads about 500, not 0 then 3,900. The lag shows only while a table applies
 * changes. The cutover's figures close the watch.
 */
import type { MultiBar, SingleBar } from 'cli-progress';
import { FerryClient } from '../client';
import { formatDuration } from '../core/duration';
import { isTerminalState } from '../core/state-machine';
import type { Phase } from '../core/state-machine';
import { liveLag, StatusDocument, TableStatus } from '../core/status';

/** Rows per second over the last `windowMs` of samples; undefined until the samples span `minSpanMs`. */
export class RateWindow {
  private readonly samples: { at: number; rows: number }[] = [];

  constructor(
    private readonly windowMs = 10_000,
    private readonly minSpanMs = 3_000,
  ) {}

  add(at: number, rows: number): void {
    // Rows only grow; a smaller figure (a retried slice) restarts the window.
    if (this.samples.length && rows < this.samples[this.samples.length - 1].rows) this.samples.length = 0;
    this.samples.push({ at, rows });
    while (this.samples.length > 2 && at - this.samples[1].at >= this.windowMs) this.samples.shift();
  }

  /**
   * The least-squares slope of rows over time: progress arrives in steps (a batch, a heartbeat
   * every 2 s), and a slope over every sample evens them out where two end points would not.
   */
  rate(): number | undefined {
    const n = this.samples.length;
    if (n < 2 || this.samples[n - 1].at - this.samples[0].at < this.minSpanMs) return undefined;
    const t0 = this.samples[0].at;
    const meanT = this.samples.reduce((a, x) => a + (x.at - t0), 0) / n;
    const meanR = this.samples.reduce((a, x) => a + x.rows, 0) / n;
    let num = 0;
    let den = 0;
    for (const x of this.samples) {
      num += (x.at - t0 - meanT) * (x.rows - meanR);
      den += (x.at - t0 - meanT) ** 2;
    }
    return den > 0 ? Math.max(0, (num / den) * 1000) : undefined;
  }
}

/** "ETA 1m20s" once a rate is known and rows remain; "" otherwise (never NaN or infinity). */
export function etaText(rows: number, total: number, rate: number | undefined): string {
  if (rate === undefined || rate <= 0 || rows >= total) return '';
  return `ETA ${formatDuration(((total - rows) / rate) * 1000)}`;
}

export function rateText(rate: number | undefined, unit: 'rows' | 'changes' = 'rows'): string {
  return rate === undefined ? `… ${unit}/s` : `${Math.round(rate)} ${unit}/s`;
}

/** A table's rows copied per second, and changes applied per second once it syncs; undefined until known. */
export interface Rates {
  rows: number | undefined;
  changes?: number;
}

/** What a table is doing, in words, in the phases where it has nothing to count. */
const DOING: Record<Exclude<Phase, 'FULL_MIGRATING' | 'INCR_SYNCING'>, string> = {
  PENDING: 'not started',
  FULL_DONE: 'copied',
  VALIDATING: 'comparing both sides',
  AWAITING_APPROVAL: 'caught up',
  CUTTING_OVER: 'applying the last changes',
  COMPLETED: 'done',
  ROLLING_BACK: 'rolling back',
  FAILED: 'failed',
};

/**
 * "1500 rows/s, ETA 10s" while a table copies, "12 changes/s" while it catches up, and what it
 * is doing in words otherwise: paused, stopped (the migration ended with it mid-way), done.
 */
export function doingText(s: StatusDocument, t: TableStatus, rates: Rates): string {
  if (s.endedAt && t.phase !== 'COMPLETED' && t.phase !== 'FAILED') return 'stopped';
  if (t.phase === 'FULL_MIGRATING' || t.phase === 'INCR_SYNCING') {
    if (s.paused) return 'paused';
    if (t.phase === 'INCR_SYNCING') return rateText(rates.changes, 'changes');
    const eta = etaText(t.rowsCopied, Math.max(t.rowsEstimated, t.rowsCopied), rates.rows);
    return eta ? `${rateText(rates.rows)}, ${eta}` : rateText(rates.rows);
  }
  return DOING[t.phase];
}

function lagText(s: StatusDocument, t: TableStatus): string {
  const lag = liveLag(s, t);
  return lag ? `lag ${lag.pendingChanges} (${lag.seconds.toFixed(1)}s)` : '';
}

/** "  5% 1200/25000 rows": the percentage and rows padded, so that the bars after them line up. */
export function figuresText(rows: number, total: number): string {
  const percent = Math.min(100, Math.floor((rows / total) * 100));
  return `${String(percent).padStart(3)}% ${String(rows).padStart(String(total).length)}/${total} rows`;
}

export function header(s: StatusDocument, now = Date.now()): string {
  const elapsed = formatDuration(Math.max(0, Date.parse(s.endedAt ?? new Date(now).toISOString()) - Date.parse(s.startedAt)));
  const retrying = s.retrying ? ` (${s.retrying.activity} attempt ${s.retrying.attempt}${s.retrying.lastError ? `: ${s.retrying.lastError}` : ''})` : '';
  return `${s.id} · ${s.state}${retrying} · ${s.phase}${s.paused ? ' (paused)' : ''} · ${elapsed}`;
}

/** The closing line: outcome, rows, duration, and the cutover's write outage when there was one. */
export function closing(s: StatusDocument): string {
  const rows = s.tables.reduce((n, t) => n + t.rowsCopied, 0);
  const paused = s.cutover?.clientPauseMs !== undefined ? `, application paused ${s.cutover.clientPauseMs} ms` : '';
  const cutover = s.cutover ? ` · write outage ${s.cutover.writeOutageMs} ms${paused}, ${s.cutover.dirtyRowsChecked} rows re-checked, ${s.cutover.afterwards}` : '';
  const error = s.error ? ` · ${s.error.message}` : '';
  return `${header(s)} · ${rows} rows${cutover}${error}`;
}

/** Where the progress goes: stderr, or in a test a stream that says it is a terminal. */
export type ProgressStream = NodeJS.WritableStream & { isTTY?: boolean; columns?: number };

export interface WatchOptions {
  intervalMs?: number;
  tty?: boolean;
  json?: boolean;
  /** Where the bars or lines go (process.stderr); NDJSON goes to stdout whatever this is. */
  stream?: ProgressStream;
  /** Called with every status read; a returned line is printed above the bars (the demo approves here). */
  onStatus?: (s: StatusDocument) => Promise<string | undefined>;
}

/** Prints until the migration ends; resolves as soon as it has. */
export async function watch(client: Pick<FerryClient, 'status' | 'result'>, id: string, options: WatchOptions = {}): Promise<void> {
  const intervalMs = options.intervalMs ?? 1000;
  const out = options.stream ?? process.stderr;
  const tty = !options.json && (options.tty ?? Boolean(out.isTTY));
  let ended = false;
  const end = client
    .result(id)
    .catch(() => undefined)
    .then(() => {
      ended = true;
    });
  const view = options.json ? new JsonView(out) : tty ? new BarsView(out) : new LinesView(out);
  let s: StatusDocument | undefined;
  try {
    // A status read as the migration ended may still show it running: once it has, one more
    // read, so that the last drawing is where it ended (done, not copied or caught up).
    for (let last = false; ; last = ended) {
      s = await client.status(id);
      view.show(s);
      const note = await options.onStatus?.(s);
      if (note) view.note(note);
      if (isTerminalState(s.state) || last) break;
      if (!ended) await Promise.race([end, new Promise((r) => setTimeout(r, intervalMs))]);
    }
  } finally {
    view.stop();
  }
  if (s && !options.json) out.write(`${closing(await client.status(id).catch(() => s!))}\n`);
}

interface View {
  show(s: StatusDocument): void;
  note(text: string): void;
  stop(): void;
}

/** Per table: its label, padded to the longest, and the rate windows of its rows and its changes. */
class Tables {
  private readonly windows = new Map<string, RateWindow>();

  labels(s: StatusDocument): string[] {
    const names = s.tables.map((t) => (t.source === t.target ? t.source : `${t.source} → ${t.target}`));
    const width = Math.max(0, ...names.map((n) => n.length));
    return names.map((n) => n.padEnd(width));
  }

  rates(i: number, t: TableStatus, at = Date.now()): Rates {
    return { rows: this.rate(`rows ${i}`, t.rowsCopied, at), changes: t.lag ? this.rate(`changes ${i}`, t.lag.changesApplied, at) : undefined };
  }

  private rate(key: string, count: number, at: number): number | undefined {
    let w = this.windows.get(key);
    if (!w) this.windows.set(key, (w = new RateWindow()));
    w.add(at, count);
    return w.rate();
  }
}

class LinesView implements View {
  private readonly tables = new Tables();
  private last = '';

  constructor(private readonly out: ProgressStream) {}

  show(s: StatusDocument): void {
    const labels = this.tables.labels(s);
    const parts = s.tables.map((t, i) => {
      const lag = lagText(s, t);
      return `${labels[i].trim()} ${t.phase} ${t.rowsCopied}/~${t.rowsEstimated} ${doingText(s, t, this.tables.rates(i, t))}${lag ? ` ${lag}` : ''}`;
    });
    const text = `${header(s).replace(/ · [^·]+$/, '')}  ${parts.join('  ')}`;
    // Written when something but the time changed, or at least every ten seconds.
    if (text !== this.last) this.out.write(`${new Date().toISOString()} ${text}\n`);
    this.last = text;
  }

  note(text: string): void {
    this.out.write(`${text}\n`);
  }

  stop(): void {}
}

class JsonView implements View {
  private last = '';

  constructor(private readonly out: ProgressStream) {}

  show(s: StatusDocument): void {
    // One status document per line (NDJSON) on stdout, whenever it changed.
    const text = JSON.stringify({ ...s, events: s.events.slice(-5), transitions: undefined });
    if (text !== this.last) process.stdout.write(`${text}\n`);
    this.last = text;
  }

  note(text: string): void {
    this.out.write(`${text}\n`);
  }

  stop(): void {}
}

/** Loaded for a terminal's bars only: every other CLI call is spared it (src/spec-file.ts: yaml). */
const cliProgress = (): typeof import('cli-progress') => require('cli-progress');

/** The widest and narrowest a table's bar is drawn. */
const BAR_WIDTH = { max: 40, min: 10 };
/** Room kept after the bar for what the table is doing, its phase and its lag. */
const AFTER_BAR = 44;
/** The line's own characters around the label, figures and bar: ' ', ' ', ' |' and '| '. */
const BAR_LINE_FIXED = 6;

/**
 * A terminal cuts every line at its width (cli-progress truncates rather than wrap, which would
 * break the redraw), so the figures come before the bar and the bar takes what the terminal
 * leaves: on 80 columns a table's rows stay in view beside a 30-character name. cli-progress
 * fills {eta}, {value}, {total}, {percentage} and {duration} itself, over any payload of the same
 * name (its own ETA read NULL for a table whose rows had stopped): the placeholders here are
 * Ferry's own.
 */
class BarsView implements View {
  private readonly tables = new Tables();
  private readonly bars: MultiBar;
  private readonly top: SingleBar;
  private readonly perTable = new Map<number, SingleBar>();

  constructor(private readonly out: ProgressStream) {
    this.bars = new (cliProgress().MultiBar)(
      {
        format: ' {label} {figures} |{bar}| {doing} | {phase}{lag}',
        hideCursor: true,
        clearOnComplete: false,
        stopOnComplete: false,
        stream: out,
      },
      cliProgress().Presets.shades_classic,
    );
    this.top = this.bars.create(1, 0, { header: '' }, { format: '{header}' });
  }

  show(s: StatusDocument): void {
    this.top.update(0, { header: header(s) });
    const labels = this.tables.labels(s);
    s.tables.forEach((t, i) => {
      const total = Math.max(1, t.rowsEstimated, t.rowsCopied);
      const lag = lagText(s, t);
      const payload = {
        label: labels[i],
        figures: figuresText(t.rowsCopied, total),
        doing: doingText(s, t, this.tables.rates(i, t)),
        phase: t.phase,
        lag: lag ? ` ${lag}` : '',
      };
      let bar = this.perTable.get(i);
      if (!bar) {
        const room = (this.out.columns || 80) - (labels[i].length + payload.figures.length + BAR_LINE_FIXED) - AFTER_BAR;
        const barsize = Math.max(BAR_WIDTH.min, Math.min(BAR_WIDTH.max, room));
        this.perTable.set(i, (bar = this.bars.create(total, 0, payload, { barsize })));
      }
      bar.setTotal(total);
      bar.update(t.rowsCopied, payload);
    });
  }

  note(text: string): void {
    this.bars.log(`${text}\n`);
  }

  stop(): void {
    this.bars.stop();
  }
}
