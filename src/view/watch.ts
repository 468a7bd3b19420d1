/**
 * Live progress for `ferry watch ID` and `ferry start --wait`: one bar per table (rows, rate,
 * ETA, phase, lag) on a terminal; plain timestamped lines when the output is not one.
 */
import cliProgress from 'cli-progress';
import { FerryClient } from '../client';
import { isTerminalState } from '../core/state-machine';
import { StatusDocument, TableStatus } from '../core/status';

function lagText(t: TableStatus): string {
  return t.lag ? `lag ${t.lag.pendingChanges} (${t.lag.seconds.toFixed(1)}s)` : '';
}

function line(s: StatusDocument): string {
  const tables = s.tables.map((t) => `${t.source} ${t.phase} ${t.rowsCopied}/~${t.rowsEstimated}${t.lag ? ` ${lagText(t)}` : ''}`);
  const retrying = s.retrying ? ` (${s.retrying.activity} attempt ${s.retrying.attempt}${s.retrying.lastError ? `: ${s.retrying.lastError}` : ''})` : '';
  return `${new Date().toISOString()} ${s.state}${retrying} ${s.phase}${s.paused ? ' (paused)' : ''}  ${tables.join('  ')}`;
}

/** Prints until the migration ends; resolves as soon as it has. */
export interface WatchOptions {
  intervalMs?: number;
  tty?: boolean;
  json?: boolean;
  /** Called with every status read; a returned line is printed above the bars (the demo approves here). */
  onStatus?: (s: StatusDocument) => Promise<string | undefined>;
}

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
  const bars = tty
    ? new cliProgress.MultiBar(
        {
          format: ' {table} |{bar}| {percentage}% {value}/{total} rows | {rate} rows/s | ETA {eta_formatted} | {phase} {lag}',
          hideCursor: true,
          clearOnComplete: false,
          stopOnComplete: false,
          stream: process.stderr,
          etaBuffer: 20,
        },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  const perTable = new Map<number, { bar: cliProgress.SingleBar; rows: number; at: number }>();
  let last = '';
  try {
    for (;;) {
      const s = await client.status(id);
      if (bars) {
        s.tables.forEach((t, i) => {
          const now = Date.now();
          let entry = perTable.get(i);
          if (!entry) {
            entry = { bar: bars.create(Math.max(1, t.rowsEstimated), 0, { table: t.source, phase: t.phase, lag: '', rate: 0 }), rows: 0, at: now };
            perTable.set(i, entry);
          }
          const rate = now > entry.at ? Math.max(0, Math.round(((t.rowsCopied - entry.rows) * 1000) / (now - entry.at))) : 0;
          entry.rows = t.rowsCopied;
          entry.at = now;
          entry.bar.setTotal(Math.max(1, t.rowsEstimated, t.rowsCopied));
          entry.bar.update(t.rowsCopied, { table: t.source, phase: t.phase + (s.paused ? ' (paused)' : ''), lag: lagText(t), rate });
        });
      } else if (options.json) {
        // One status document per line (NDJSON) on stdout, whenever it changed.
        const text = JSON.stringify({ ...s, events: s.events.slice(-5), transitions: undefined });
        if (text !== last) process.stdout.write(`${text}\n`);
        last = text;
      } else {
        const text = line(s).slice(25);
        if (text !== last) process.stderr.write(`${line(s)}\n`);
        last = text;
      }
      const note = await options.onStatus?.(s);
      if (note && bars) bars.log(`${note}\n`);
      else if (note) process.stderr.write(`${note}\n`);
      if (isTerminalState(s.state) || ended) return;
      await Promise.race([end, new Promise((r) => setTimeout(r, intervalMs))]);
    }
  } finally {
    bars?.stop();
  }
}
