/** Status and result documents as people read them (the CLI, `ferry watch`, the demo). */
import { ControlTransition, describeControl, liveLag, ResultDocument, StatusDocument } from '../core/status';

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
    const lag = liveLag(s, t);
    lines.push(
      `  ${t.source} → ${t.target}  ${t.phase}  ${t.rowsCopied} / ~${t.rowsEstimated} rows${pct(t.rowsCopied, t.rowsEstimated)}  chunks ${done}/${t.chunks.length}${lag ? `  lag ${lag.pendingChanges} changes, ${lag.seconds}s` : ''}`,
    );
  }
  if (s.capture) {
    const c = s.capture;
    lines.push(`capture: logical  slot lag ${c.slotLagBytes} bytes, ${c.slotLagSeconds}s  confirmed ${c.confirmedLsn ?? '(nothing yet)'}`);
    // The slot is invalidated (and the migration lost) once it holds max_slot_wal_keep_size.
    if (c.safeWalBytes !== null && c.safeWalBytes < c.slotLagBytes) {
      lines.push(`warning: the slot may hold only ${c.safeWalBytes} more bytes of WAL before max_slot_wal_keep_size invalidates it`);
    }
  }
  if (s.cutoverBlockers?.length) {
    lines.push('cutover waits for write transactions begun before the freeze:');
    for (const b of s.cutoverBlockers) {
      lines.push(`  pid ${b.pid}  ${b.applicationName || '(no application name)'}  user ${b.user}  open ${b.xactAgeSeconds}s  ${b.state}  ${b.query}`);
    }
  }
  if (s.error) lines.push(`error: ${s.error.message}${s.error.cause ? ` (cause: ${s.error.cause})` : ''}`);
  for (const w of s.warnings ?? []) lines.push(`warning: ${w}`);
  const controls = s.transitions.filter((t): t is ControlTransition => t.machine === 'control').slice(-3);
  if (controls.length) lines.push('recent controls:', ...controls.map((c) => `  ${describeControl(c)}`));
  const recent = s.events.slice(-5).map((e) => `  #${e.seq} ${e.at} ${e.type}${e.table ? ` ${e.table}` : ''}`);
  if (recent.length) lines.push('recent events:', ...recent);
  if (s.eventStream) lines.push(`events also on the stream ${s.eventStream.stream}, subjects ${s.eventStream.subjects} (ferry events ${s.id})`);
  return lines.join('\n');
}

export function formatResult(r: ResultDocument): string {
  const lines = [`migration ${r.task_id} ${r.state} in ${r.duration}  (${r.rowsCopied} rows)`];
  for (const t of r.tables) lines.push(`  ${t.source} → ${t.target}  ${t.phase}  ${t.rowsCopied} rows`);
  if (r.error) lines.push(`error: ${r.error.message}${r.error.cause ? ` (cause: ${r.error.cause})` : ''}`);
  if (r.cutover) {
    lines.push(
      `cutover: write outage ${(r.cutover.writeOutageMs / 1000).toFixed(2)}s, ${r.cutover.dirtyRowsChecked} changed rows re-checked, source ${r.cutover.afterwards === 'unfreeze' ? 'unfrozen' : 'kept frozen'}` +
        (r.cutover.clientPauseMs !== undefined ? `; the application paused ${(r.cutover.clientPauseMs / 1000).toFixed(2)}s by ${r.cutover.switch === 'pgbouncer' ? 'PgBouncer' : 'the webhook switcher'}, then on the target` : ''),
    );
  }
  if (r.timeline?.length) lines.push(`time: ${r.timeline.map((t) => `${t.step} ${((t.ms ?? 0) / 1000).toFixed(1)}s`).join(', ')}`);
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  for (const c of r.controls ?? []) lines.push(`control: ${describeControl(c)}`);
  if (r.callback) lines.push(`callback: ${r.callback.delivered ? 'delivered' : `not delivered (${r.callback.error})`}`);
  return lines.join('\n');
}
