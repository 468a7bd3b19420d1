/**
 * The Web UI's "current details" of a migration, written for people (the UI renders markdown):
 * the state, a small table of the tables, what a person has to do when the migration waits for
 * one, who blocks a cutover, and the outcome with its figures at the end. Pure: the workflow
 * renders it from its status document on every change.
 */
import { Blocker, StatusDocument } from './status';

const n = (x: number) => x.toLocaleString('en-US');

/** What a person can do now, when the migration waits for one. */
function nextAction(s: StatusDocument): string | undefined {
  if (s.paused) return `paused: \`ferry resume ${s.id}\` goes on`;
  if (s.phase === 'AWAITING_APPROVAL') return `waiting for approval: \`ferry approve ${s.id}\` starts the cutover (\`ferry cancel ${s.id}\` rolls back)`;
  if (s.state === 'FAILED') return `\`ferry retry ${s.id}\` resumes from the checkpoints if it kept its work (onFailure: keep); \`ferry cleanup ${s.id}\` removes what is left`;
  return undefined;
}

function blockerLine(b: Blocker): string {
  const who = b.pid ? `pid ${b.pid}` : 'a prepared transaction';
  return `- ${who} (${b.applicationName || 'no application name'}, user ${b.user}), open ${b.xactAgeSeconds}s: \`${b.query.replace(/`/g, "'")}\``;
}

function outcome(s: StatusDocument): string | undefined {
  if (!s.endedAt) return undefined;
  const rows = s.tables.reduce((a, t) => a + t.rowsCopied, 0);
  const parts = [`**${s.state}**`, `${n(rows)} rows`];
  if (s.cutover) parts.push(`write outage ${n(s.cutover.writeOutageMs)} ms`, `${n(s.cutover.dirtyRowsChecked)} rows re-checked at cutover`, `source ${s.cutover.afterwards}`);
  if (s.error) parts.push(`${s.error.type ? `${s.error.type}: ` : ''}${s.error.message}`);
  return `Outcome: ${parts.join(' · ')}`;
}

export function migrationDetails(s: StatusDocument, blockers: Blocker[] = []): string {
  const out = [`**${s.state}** · ${s.phase}${s.paused ? ' · paused' : ''}`, ''];
  if (s.tables.length) {
    out.push('| table | phase | rows | lag |', '| --- | --- | ---: | --- |');
    for (const t of s.tables) {
      const name = t.source === t.target ? t.source : `${t.source} → ${t.target}`;
      const lag = t.lag ? `${n(t.lag.pendingChanges)} waiting (${t.lag.seconds.toFixed(1)} s)` : '';
      out.push(`| ${name} | ${t.phase} | ${n(t.rowsCopied)} / ~${n(t.rowsEstimated)} | ${lag} |`);
    }
    out.push('');
  }
  const next = nextAction(s);
  if (next) out.push(`**Next:** ${next}`, '');
  if (blockers.length) out.push('**The cutover waits for these write transactions, begun before the freeze:**', ...blockers.map(blockerLine), '');
  const end = outcome(s);
  if (end) out.push(end);
  return out.join('\n').trim();
}
