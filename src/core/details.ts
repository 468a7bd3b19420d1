/**
 * The Web UI's "current details" of a migration, written for people (the UI renders markdown):
 * the state, a small table of the tables, what a person has to do when the migration waits for
 * one, who blocks a cutover, and the outcome with its figures at the end. Pure: the workflow
 * renders it from its status document on every change.
 */
import { formatDuration } from './duration';
import type { Spec } from './spec';
import type { ChangeStatusDocument } from './change-status';
import { Blocker, liveLag, StatusDocument } from './status';
import type { EventStreamWhere } from './event-subjects';

const n = (x: number) => x.toLocaleString('en-US');

/** What a person can do now, when the migration waits for one. */
function nextAction(s: StatusDocument): string | undefined {
  if (s.paused) return `paused: \`ferry resume ${s.id}\` goes on`;
  if (s.phase === 'AWAITING_APPROVAL') return `waiting for approval: \`ferry approve ${s.id}\` starts the cutover (\`ferry cancel ${s.id}\` rolls back)`;
  if (s.state === 'FAILED') {
    // Kept work first: a kept online migration may still have undone one step (the freeze).
    if (keptWork(s)) return `\`ferry retry ${s.id}\` resumes from the checkpoints it kept (onFailure: keep); \`ferry cleanup ${s.id}\` removes what it left`;
    if (rolledBack(s)) return `fix the cause, then \`ferry retry ${s.id}\` starts it again (the rollback left nothing to resume from)`;
    return `fix the cause, then \`ferry retry ${s.id}\` starts it again; \`ferry cleanup ${s.id}\` removes anything it left`;
  }
  return undefined;
}

/** Whether the migration ended with its work left in place (onFailure: keep says so in a warning). */
function keptWork(s: StatusDocument): boolean {
  return s.warnings?.some((w) => w.startsWith('onFailure: keep')) ?? false;
}

/** Whether the ending undid the migration's work: a RolledBack event, and which undo steps failed. */
function rolledBack(s: StatusDocument): { failedSteps: string[] } | undefined {
  const event = s.events.find((e) => e.type === 'RolledBack');
  if (!event) return undefined;
  const failed = event.detail?.failedSteps;
  return { failedSteps: Array.isArray(failed) ? failed.map(String) : [] };
}

/** The phase the migration was in when it began to fail (before ROLLING_BACK, or before FAILED). */
function stoppedIn(s: StatusDocument): string | undefined {
  const phases = s.transitions.filter((t) => t.machine === 'phase');
  const end = phases.find((t) => t.to === 'ROLLING_BACK') ?? phases.find((t) => t.to === 'FAILED');
  return end?.from;
}

/** The first line: the state and phase; once it ended without success, where it stopped and what was undone. */
function headline(s: StatusDocument): string {
  if (!s.endedAt || s.state === 'SUCCEEDED') return `**${s.state}** · ${s.phase}${s.paused ? ' · paused' : ''}`;
  const parts = [`**${s.state}**`];
  if (s.state === 'TIMED_OUT') parts.push('the deadline passed before the migration finished');
  const where = stoppedIn(s);
  if (where) parts.push(`stopped in ${where}`);
  const undone = rolledBack(s);
  if (keptWork(s)) parts.push('its work kept (onFailure: keep)');
  else if (undone) parts.push(undone.failedSteps.length ? `rolled back, except: ${undone.failedSteps.join(', ')}` : 'rolled back');
  return parts.join(' · ');
}

/** Why it ended without success: the failure's type (a SQLSTATE for PostgreSQL), its message and its root cause. */
function why(s: StatusDocument): string | undefined {
  if (!s.endedAt || s.state === 'SUCCEEDED' || !s.error) return undefined;
  const { type, message, cause } = s.error;
  // PostgreSQL's own words as code: verbatim, its quotes not turned into typographic ones.
  return `**Why:** ${type ? `\`${type}\` ` : ''}${message}${cause && cause !== message ? ` — \`${cause.replace(/`/g, "'")}\`` : ''}`;
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
  if (s.cutover?.clientPauseMs !== undefined) parts.push(`application paused ${n(s.cutover.clientPauseMs)} ms (${s.cutover.switch})`);
  return `Outcome: ${parts.join(' · ')}`;
}

/**
 * Web UI 2.42.1 sizes the frame that shows these details to its body's scrollHeight, which
 * leaves out the margins of the first and last paragraph: about 30 px of the bottom are cut off.
 * A last paragraph holding only a no-break space makes what is cut blank.
 */
const CLIPPED_TAIL = '\u00a0';

/** Markdown for a Web UI details panel: the text, then the blank paragraph the UI may cut off. */
export function forWebUi(markdown: string): string {
  return `${markdown.trim()}\n\n${CLIPPED_TAIL}`;
}

/**
 * Details are for people: a fault in rendering them must not fail the workflow task that carries
 * the migration on, as that task would be retried, and fail, until the migration's deadline.
 * The fault is shown in their place.
 */
export function detailsOrFault(render: () => string): string {
  try {
    return render();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    return forWebUi(`**These details could not be rendered** (the workflow goes on; \`ferry status\` shows it): \`${message.replace(/`/g, "'")}\``);
  }
}

/** Tables the details list by name; past this many, only those under way (or stopped, or failed) are, and the rest counted. */
export const DETAILS_TABLES = 100;

/**
 * The details' table of tables. A migration of thousands lists those that are neither waiting
 * nor done (at most DETAILS_TABLES) and counts the rest by phase: a row for each of 10,000 tables
 * is nothing a person reads, and rendering it on every change kept the worker's workflow heap busy.
 */
function tableRows(s: StatusDocument): string[] {
  const ended = Boolean(s.endedAt) && s.state !== 'SUCCEEDED';
  const many = s.tables.length > DETAILS_TABLES;
  const listed = many ? s.tables.filter((t) => t.phase !== 'PENDING' && t.phase !== 'COMPLETED').slice(0, DETAILS_TABLES) : s.tables;
  const rows = ['| table | phase | rows | lag |', '| --- | --- | ---: | --- |'];
  for (const t of listed) {
    const name = t.source === t.target ? t.source : `${t.source} → ${t.target}`;
    const live = liveLag(s, t);
    const lag = live ? `${n(live.pendingChanges)} waiting (${live.seconds.toFixed(1)} s)` : '';
    const phase = ended && t.phase !== 'COMPLETED' && t.phase !== 'FAILED' ? `stopped in ${t.phase}` : t.phase;
    rows.push(`| ${name} | ${phase} | ${n(t.rowsCopied)} / ~${n(t.rowsEstimated)} | ${lag} |`);
  }
  if (!many) return rows;
  const byPhase = new Map<string, number>();
  for (const t of s.tables) byPhase.set(t.phase, (byPhase.get(t.phase) ?? 0) + 1);
  const counts = [...byPhase].map(([phase, count]) => `${n(count)} ${phase}`).join(', ');
  const which = listed.length === DETAILS_TABLES ? `the first ${DETAILS_TABLES} of those` : 'those';
  const note = `${n(s.tables.length)} tables (${counts}); listed below: ${which} neither waiting nor done — \`ferry status\` lists every one.`;
  return listed.length ? [note, '', ...rows] : [note];
}

/** The switch's last step (cutover.switch), in words: what the application's connections are doing now. */
function switchLine(s: StatusDocument): string | undefined {
  const last = [...s.events].reverse().find((e) => e.type.startsWith('Switch'));
  if (!last) return undefined;
  const d = last.detail ?? {};
  const who = d.switch === 'pgbouncer' ? `PgBouncer's ${String(d.database)}` : 'the webhook switcher';
  const pause = typeof d.clientPauseMs === 'number' ? ` after ${n(d.clientPauseMs)} ms` : '';
  const words: Record<string, string> = {
    SwitchPaused: `${who} paused at ${last.at}: the application's queries are held`,
    SwitchRepointed: `${who} points at the target (${String(d.target)}); the queries are still held`,
    SwitchResumed: `${who} resumed on the ${d.on === 'source' ? 'source (rolled back)' : 'target'}${pause}`,
  };
  return `**Switch:** ${words[last.type] ?? last.type}`;
}

export function migrationDetails(s: StatusDocument, blockers: Blocker[] = []): string {
  const out = [headline(s), ''];
  const reason = why(s);
  if (reason) out.push(reason, '');
  if (s.tables.length) out.push(...tableRows(s), '');
  const next = nextAction(s);
  if (next) out.push(`**Next:** ${next}`, '');
  if (blockers.length) out.push('**The cutover waits for these write transactions, begun before the freeze:**', ...blockers.map(blockerLine), '');
  const switched = switchLine(s);
  if (switched) out.push(switched, '');
  if (s.eventStream) out.push(streamLine(s.eventStream), '');
  const end = outcome(s);
  if (end) out.push(end, '');
  return forWebUi(out.join('\n'));
}

/** What each of the saga's undo steps (workflows/saga.ts) does, in words. */
const UNDO_WORDS: Record<string, string> = {
  dropTargetObjects: 'dropped what it created on the target',
  releaseSource: 'removed its change capture from the source',
  removeCapture: 'removed its change capture from the source',
  openSource: 'lifted the write freeze on the source',
  resumePool: "resumed PgBouncer's pooled database on the source",
  revertSwitch: 'told the webhook switcher to revert',
};

export interface Ending {
  /** The spec's deadline, when it has one. */
  deadlineMs?: number;
  /** The names of the undo steps that ran, newest first (none: nothing was rolled back). */
  undone: string[];
  /** Those of them that failed. */
  failedUndo: string[];
  /** onFailure: keep left the work in place. */
  kept: boolean;
}

/**
 * The message of the failure a migration that did not succeed ends with: what the Web UI shows
 * at the top of the workflow's failure and in its list, and what the `temporal` CLI prints. It
 * leads with the outcome when that is not a plain failure (TIMED OUT, CANCELLED), then the root
 * cause — the failure's message with PostgreSQL's own words after it (its SQLSTATE is in the
 * message, and the failure's type) — then what the ending undid.
 */
export function endingMessage(s: StatusDocument, ending: Ending): string {
  const error = s.error;
  const cause = error?.cause && error.cause !== error.message ? `: ${error.cause}` : '';
  let head: string;
  if (s.state === 'TIMED_OUT') {
    head = `TIMED OUT: the deadline${ending.deadlineMs !== undefined ? ` (${formatDuration(ending.deadlineMs)})` : ''} passed before the migration finished`;
  } else if (s.state === 'CANCELLED') {
    head = `CANCELLED: ${error?.message ?? 'cancelled'}`;
  } else {
    head = `${error?.message ?? s.state}${cause}`;
  }
  const undone = [...new Set(ending.undone.filter((n) => !ending.failedUndo.includes(n)).map((n) => UNDO_WORDS[n] ?? n))];
  const tail: string[] = [];
  if (undone.length) tail.push(`rolled back: ${undone.join(', ')}`);
  if (ending.failedUndo.length) tail.push(`rollback steps that failed: ${ending.failedUndo.join(', ')} (ferry cleanup ${s.id} finishes them)`);
  if (ending.kept) tail.push(`its work kept (onFailure: keep): ferry retry ${s.id} or ferry cleanup ${s.id}`);
  return tail.length ? `${head}; ${tail.join('; ')}` : head;
}

/**
 * The Web UI's (static) details of a migration, set when it starts: what it moves, and the
 * commands that follow and steer it. The current details say where it stands.
 */
export function migrationStaticDetails(id: string, spec: Spec, shown = 10): string {
  const q = (t: { schema: string; name: string }) => `${t.schema}.${t.name}`;
  const tables = spec.tables.map((t) => (q(t.source) === q(t.target) ? q(t.source) : `${q(t.source)} → ${q(t.target)}`));
  // Patterns: what they choose is known after preflight (the plan, `ferry status`).
  for (const { pattern } of spec.selection?.include ?? []) tables.push(`${pattern.text} (pattern)`);
  for (const pattern of spec.selection?.exclude ?? []) tables.push(`not ${pattern.text} (exclude)`);
  const what = spec.selection ? 'tables chosen by pattern' : `${tables.length} table(s)`;
  const lines = [`**${spec.mode}** migration of ${what} from connection \`${spec.source}\` to \`${spec.target}\``, ''];
  lines.push(...tables.slice(0, shown).map((t) => `- ${t}`));
  if (tables.length > shown) lines.push(`- … and ${tables.length - shown} more`);
  lines.push('', `Follow it: \`ferry watch ${id}\` · \`ferry status ${id}\` · stop it: \`ferry cancel ${id}\``);
  if (spec.mode === 'online' && spec.cutover?.approval === 'manual') lines.push('', `The cutover waits for \`ferry approve ${id}\`.`);
  return forWebUi(lines.join('\n'));
}

/** A change plan's current details: state and phase (paused, what it waits for), the database, a line per step. */
export function changeDetails(s: ChangeStatusDocument): string {
  const head = `**${s.state}** · ${s.phase}${s.paused ? ' · paused' : ''}${s.waiting ? ` · waiting: ${s.waiting}` : ''}`;
  const lines = s.steps.map((step) => `- ${step.index + 1}. ${step.label}: ${step.state}${step.progress ? ` ${step.progress.done}/${step.progress.total} ${step.progress.unit}` : ''}`);
  return forWebUi([head, `database ${s.database}`, ...lines, ...(s.eventStream ? ['', streamLine(s.eventStream)] : [])].join('\n'));
}

/** Where the events also go, for people: the stream and the subjects to subscribe to. */
function streamLine(where: EventStreamWhere): string {
  return `**Events:** NATS JetStream stream \`${where.stream}\`, subjects \`${where.subjects}\` (\`ferry events\` reads them)`;
}
