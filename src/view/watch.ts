/**
 * Live progress for `ferry watch ID` and `ferry start --wait`: a header (id, state, phase, time
 * since the start) and one bar per table (source → target, rows, rate, ETA, phase, lag) on a
 * terminal; plain timestamped lines when the output is not one; NDJSON with --json. Rates come
 * from a sliding window over the rows the status reads (the tables' live progress: at most a few
 * seconds old), so a copy under a cap of 500 rows/s reads about 500, not 0 then 3,900; the ETA
 * shows only once a rate is known. The cutover's figures close the watch.
 */
import type { SingleBar } from 'cli-progress';
import { FerryClient } from '../client';
import { formatDuration } from '../core/duration';
import { isTerminalState } from '../core/state-machine';
import { StatusDocument, TableStatus } from '../core/status';

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

export function rateText(rate: number | undefined): string {
  return rate === undefined ? '… rows/s' : `${Math.round(rate)} rows/s`;
}

function lagText(t: TableStatus): string {
  return t.lag ? `lag ${t.lag.pendingChanges} (${t.lag.seconds.toFixed(1)}s)` : '';
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

export interface WatchOptions {
  intervalMs?: number;
  tty?: boolean;
  json?: boolean;
  /** Called with every status read; a returned line is printed above the bars (the demo approves here). */
  onStatus?: (s: StatusDocument) => Promise<string | undefined>;
}

/** Prints until the migration ends; resolves as soon as it has. */
export async function watch(client: FerryClient, id: string, options: WatchOptions = {}): Promise<void> {
  const intervalMs = options.intervalMs ?? 1000;
  const tty = !options.json && (options.tty ?? Boolean(process.stderr.isTTY));
  let ended = false;
  const end = client
    .result(id)
    .catch(() => undefined)
    .then(() => {
      ended = true;
    });
  const view = options.json ? new JsonView() : tty ? new BarsView() : new LinesView();
  let s: StatusDocument | undefined;
  try {
    for (;;) {
      s = await client.status(id);
      view.show(s);
      const note = await options.onStatus?.(s);
      if (note) view.note(note);
      if (isTerminalState(s.state) || ended) break;
      await Promise.race([end, new Promise((r) => setTimeout(r, intervalMs))]);
    }
  } finally {
    view.stop();
  }
  if (s && !options.json) process.stderr.write(`${closing(await client.status(id).catch(() => s!))}\n`);
}

interface View {
  show(s: StatusDocument): void;
  note(text: string): void;
  stop(): void;
}

/** Per table: its label, padded to the longest, and its rate window. */
class Tables {
  private readonly windows = new Map<number, RateWindow>();

  labels(s: StatusDocument): string[] {
    const names = s.tables.map((t) => (t.source === t.target ? t.source : `${t.source} → ${t.target}`));
    const width = Math.max(0, ...names.map((n) => n.length));
    return names.map((n) => n.padEnd(width));
  }

  rate(i: number, rows: number, at = Date.now()): number | undefined {
    let w = this.windows.get(i);
    if (!w) this.windows.set(i, (w = new RateWindow()));
    w.add(at, rows);
    return w.rate();
  }
}

class LinesView implements View {
  private readonly tables = new Tables();
  private last = '';

  show(s: StatusDocument): void {
    const labels = this.tables.labels(s);
    const parts = s.tables.map((t, i) => {
      const rate = this.tables.rate(i, t.rowsCopied);
      return `${labels[i].trim()} ${t.phase} ${t.rowsCopied}/~${t.rowsEstimated} ${rateText(rate)}${t.lag ? ` ${lagText(t)}` : ''}`;
    });
    const text = `${header(s).replace(/ · [^·]+$/, '')}  ${parts.join('  ')}`;
    // Written when something but the time changed, or at least every ten seconds.
    if (text !== this.last) process.stderr.write(`${new Date().toISOString()} ${text}\n`);
    this.last = text;
  }

  note(text: string): void {
    process.stderr.write(`${text}\n`);
  }

  stop(): void {}
}

class JsonView implements View {
  private last = '';

  show(s: StatusDocument): void {
    // One status document per line (NDJSON) on stdout, whenever it changed.
    const text = JSON.stringify({ ...s, events: s.events.slice(-5), transitions: undefined });
    if (text !== this.last) process.stdout.write(`${text}\n`);
    this.last = text;
  }

  note(text: string): void {
    process.stderr.write(`${text}\n`);
  }

  stop(): void {}
}

/** Loaded for a terminal's bars only: every other CLI call is spared it (src/spec-file.ts: yaml). */
const cliProgress = (): typeof import('cli-progress') => require('cli-progress');

/** The widest and narrowest a table's bar is drawn. */
const BAR_WIDTH = { max: 40, min: 10 };
/** Room kept after the bar for its rate, ETA, phase and lag. */
const AFTER_BAR = 44;
/** The line's own characters around the label, figures and bar: ' ', ' ', ' |' and '| '. */
const BAR_LINE_FIXED = 6;

/**
 * A terminal cuts every line at its width (cli-progress truncates rather than wrap, which would
 * break the redraw), so the figures come before the bar and the bar takes what the terminal
 * leaves: on 80 columns a table's rows stay in view beside a 30-character name.
 */
class BarsView implements View {
  private readonly tables = new Tables();
  private readonly bars = new (cliProgress().MultiBar)(
    {
      format: ' {label} {figures} |{bar}| {rate} | {eta} | {phase} {lag}',
      hideCursor: true,
      clearOnComplete: false,
      stopOnComplete: false,
      stream: process.stderr,
    },
    cliProgress().Presets.shades_classic,
  );
  private readonly top = this.bars.create(1, 0, { header: '' }, { format: '{header}' });
  private readonly perTable = new Map<number, SingleBar>();

  show(s: StatusDocument): void {
    this.top.update(0, { header: header(s) });
    const labels = this.tables.labels(s);
    s.tables.forEach((t, i) => {
      const rate = this.tables.rate(i, t.rowsCopied);
      const total = Math.max(1, t.rowsEstimated, t.rowsCopied);
      const payload = {
        label: labels[i],
        figures: figuresText(t.rowsCopied, total),
        phase: t.phase + (s.paused ? ' (paused)' : ''),
        lag: lagText(t),
        rate: rateText(rate),
        eta: etaText(t.rowsCopied, total, rate) || 'ETA –',
      };
      let bar = this.perTable.get(i);
      if (!bar) {
        const room = (process.stderr.columns || 80) - (labels[i].length + payload.figures.length + BAR_LINE_FIXED) - AFTER_BAR;
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
