/** A change plan's status and result as people read them, and `ferry watch` for plans: a line per step. */
import { FerryClient } from '../client';
import { ChangeResultDocument, ChangeStatusDocument, StepStatus } from '../core/change-status';
import { isTerminalState } from '../core/state-machine';
import { ControlTransition, describeControl } from '../core/status';

function progressText(s: StepStatus, rate?: number): string {
  const p = s.progress;
  if (!p) return '';
  const pct = p.total > 0 ? ` (${Math.min(100, Math.round((100 * p.done) / p.total))}%)` : '';
  const eta = rate && rate > 0 && p.total > p.done && s.state === 'RUNNING' ? `  ETA ${Math.round((p.total - p.done) / rate)}s` : '';
  return `  ${p.done}/${p.total} ${p.unit}${pct}${p.phase ? ` ${p.phase}` : ''}${eta}`;
}

export function stepLine(s: StepStatus, rate?: number): string {
  const extra = [
    s.rowsUpdated !== undefined ? `${s.rowsUpdated} rows updated` : '',
    s.passes && s.passes > 1 ? `${s.passes} passes` : '',
    s.attempts && s.attempts > 1 ? `${s.attempts} attempts` : '',
  ].filter(Boolean);
  return `  ${String(s.index + 1).padStart(2)}. ${s.state.padEnd(11)} ${s.label}${progressText(s, rate)}${extra.length ? `  [${extra.join(', ')}]` : ''}${s.error ? `\n      error: ${s.error.message}` : ''}${s.note ? `\n      note: ${s.note}` : ''}`;
}

export function formatChangeStatus(s: ChangeStatusDocument): string {
  const throttle = s.throttle.rowsPerSecond ? `  cap ${s.throttle.rowsPerSecond} rows/s` : '';
  const lines = [
    `change ${s.id} on ${s.database}  state ${s.state}  phase ${s.phase}${s.paused ? '  PAUSED' : ''}${throttle}`,
    `started ${s.startedAt}${s.endedAt ? `  ended ${s.endedAt}` : ''}`,
    ...s.steps.map((step) => stepLine(step)),
  ];
  if (s.waiting) lines.push(`waiting: ${s.waiting}`);
  if (s.retrying) lines.push(`retrying ${s.retrying.activity} (attempt ${s.retrying.attempt})${s.retrying.lastError ? `: ${s.retrying.lastError}` : ''}`);
  if (s.error) lines.push(`error: ${s.error.message}${s.error.cause ? ` (cause: ${s.error.cause})` : ''}`);
  for (const w of s.warnings ?? []) lines.push(`warning: ${w}`);
  const controls = s.transitions.filter((t): t is ControlTransition => t.machine === 'control').slice(-3);
  if (controls.length) lines.push('recent controls:', ...controls.map((c) => `  ${describeControl(c)}`));
  const recent = s.events.slice(-5).map((e) => `  #${e.seq} ${e.at} ${e.type}${e.step !== undefined ? ` step ${e.step + 1}` : ''}`);
  if (recent.length) lines.push('recent events:', ...recent);
  if (s.eventStream) lines.push(`events also on the stream ${s.eventStream.stream}, subjects ${s.eventStream.subjects} (ferry events ${s.id})`);
  return lines.join('\n');
}

export function formatChangeResult(r: ChangeResultDocument): string {
  const lines = [`change ${r.task_id} on ${r.database} ${r.state} in ${r.duration}  (${r.rowsBackfilled} rows backfilled)`, ...r.steps.map((s) => stepLine(s))];
  if (r.error) lines.push(`error: ${r.error.message}${r.error.cause ? ` (cause: ${r.error.cause})` : ''}`);
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  for (const c of r.controls ?? []) lines.push(`control: ${describeControl(c)}`);
  if (r.callback) lines.push(`callback: ${r.callback.delivered ? 'delivered' : `not delivered (${r.callback.error})`}`);
  return lines.join('\n');
}

/** Prints the plan's step lines whenever they change, until it ends (JSON lines with `json`). */
export async function watchChange(client: FerryClient, id: string, options: { intervalMs?: number; json?: boolean } = {}): Promise<void> {
  let last = '';
  const seen = new Map<number, { done: number; at: number; rate?: number }>();
  for (;;) {
    const s = await client.changeStatus(id);
    const now = Date.now();
    for (const step of s.steps) {
      const before = seen.get(step.index);
      const done = step.progress?.done ?? 0;
      const rate = before && now > before.at && done >= before.done ? ((done - before.done) * 1000) / (now - before.at) : before?.rate;
      seen.set(step.index, { done, at: now, rate });
    }
    const text = options.json
      ? JSON.stringify({ ...s, transitions: undefined, events: s.events.slice(-5) })
      : [`${s.state} ${s.phase}${s.paused ? ' (paused)' : ''}${s.waiting ? ` waiting: ${s.waiting}` : ''}`, ...s.steps.map((step) => stepLine(step, seen.get(step.index)?.rate))].join('\n');
    if (text !== last) {
      if (options.json) process.stdout.write(`${text}\n`);
      else process.stderr.write(`${new Date().toISOString()} ${text}\n`);
    }
    last = text;
    if (isTerminalState(s.state) || s.endedAt) return;
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 1000));
  }
}
