/** How the CLI prints errors, status and results, and which exit code each error means. */
import { ZodError } from 'zod';
import { ConfigError } from '../config';
import { RefusedError } from '../client';
import { PostgresUnreachableError, rootMessage } from '../failures';
import { SpecError } from '../spec';
import { ResultDocument, StatusDocument } from '../status';

/** An error that already says everything; exits with its code. */
export class CliExit extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

export function exitCodeFor(err: unknown): number {
  if (err instanceof CliExit) return err.code;
  if (err instanceof SpecError || err instanceof RefusedError || err instanceof ZodError || err instanceof ConfigError) return 2;
  return 1;
}

export function printError(err: unknown): void {
  if (err instanceof SpecError) {
    process.stderr.write(`ferry: the spec is invalid; nothing was started\n`);
    for (const p of err.problems) process.stderr.write(`  ${p.path}: ${p.message}\n`);
    return;
  }
  if (err instanceof RefusedError) {
    process.stderr.write(`ferry: refused (${err.type}); nothing was started\n  ${err.message}\n`);
    return;
  }
  if (err instanceof ConfigError) {
    process.stderr.write(`ferry: configuration: ${err.message}\n`);
    return;
  }
  if (err instanceof ZodError) {
    for (const issue of err.issues) process.stderr.write(`ferry: ${issue.path.join('.')}: ${issue.message}\n`);
    return;
  }
  if (err instanceof CliExit || err instanceof PostgresUnreachableError) {
    if (err.message) process.stderr.write(`ferry: ${err.message}\n`);
    return;
  }
  const message = (err as Error)?.message ?? String(err);
  const root = rootMessage(err);
  process.stderr.write(`ferry: ${message}${root !== message ? `\n  cause: ${root}` : ''}\n`);
  if (/ECONNREFUSED|Failed to connect|transport error|UNAVAILABLE/i.test(`${message} ${root}`)) {
    process.stderr.write(`  is Temporal running at ${process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233'}? Start one with \`ferry server\`.\n`);
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

function pct(copied: number, estimated: number): string {
  return estimated > 0 ? ` (${Math.min(100, Math.round((100 * copied) / estimated))}%)` : '';
}

export function formatStatus(s: StatusDocument): string {
  const lines = [
    `migration ${s.id}  state ${s.state}  phase ${s.phase}${s.paused ? '  PAUSED' : ''}`,
    `started ${s.startedAt}${s.endedAt ? `  ended ${s.endedAt}` : ''}`,
  ];
  for (const t of s.tables) {
    const done = t.chunks.filter((c) => c.state === 'DONE').length;
    lines.push(
      `  ${t.source} → ${t.target}  ${t.phase}  ${t.rowsCopied} / ~${t.rowsEstimated} rows${pct(t.rowsCopied, t.rowsEstimated)}  chunks ${done}/${t.chunks.length}${t.lag ? `  lag ${t.lag.pendingChanges} changes, ${t.lag.seconds}s` : ''}`,
    );
  }
  if (s.cutoverBlockers?.length) {
    lines.push('cutover waits for write transactions begun before the freeze:');
    for (const b of s.cutoverBlockers) {
      lines.push(`  pid ${b.pid}  ${b.applicationName || '(no application name)'}  user ${b.user}  open ${b.xactAgeSeconds}s  ${b.state}  ${b.query}`);
    }
  }
  if (s.error) lines.push(`error: ${s.error.message}${s.error.cause ? ` (cause: ${s.error.cause})` : ''}`);
  for (const w of s.warnings ?? []) lines.push(`warning: ${w}`);
  const recent = s.events.slice(-5).map((e) => `  #${e.seq} ${e.at} ${e.type}${e.table ? ` ${e.table}` : ''}`);
  if (recent.length) lines.push('recent events:', ...recent);
  return lines.join('\n');
}

export function formatResult(r: ResultDocument): string {
  const lines = [`migration ${r.task_id} ${r.state} in ${r.duration}  (${r.rows_copied} rows)`];
  for (const t of r.tables) lines.push(`  ${t.source} → ${t.target}  ${t.phase}  ${t.rowsCopied} rows`);
  if (r.error) lines.push(`error: ${r.error.message}${r.error.cause ? ` (cause: ${r.error.cause})` : ''}`);
  if (r.cutover) {
    lines.push(
      `cutover: write outage ${(r.cutover.writeOutageMs / 1000).toFixed(2)}s, ${r.cutover.dirtyRowsChecked} changed rows re-checked, source ${r.cutover.afterwards === 'unfreeze' ? 'unfrozen' : 'kept frozen'}`,
    );
  }
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  if (r.callback) lines.push(`callback: ${r.callback.delivered ? 'delivered' : `not delivered (${r.callback.error})`}`);
  return lines.join('\n');
}
