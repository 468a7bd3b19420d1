/** `ferry list` as text: a header and aligned columns, one migration or change plan a line. */
import type { MigrationSummary } from '../client';

const ERROR_WIDTH = 80;

/** `2026-12-01T13:45:17.123Z` → `2026-12-01 13:45:17Z`: a column, not a timestamp to parse. */
function shortTime(iso: string | undefined): string {
  return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '-';
}

function oneLine(text: string, width: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > width ? `${flat.slice(0, width - 1)}…` : flat;
}

export function formatList(rows: MigrationSummary[]): string {
  const header = ['ID', 'STATE', 'PHASE', 'SOURCE', 'TARGET', 'ROWS', 'STARTED', 'ENDED', 'ERROR'];
  const lines = rows.map((m) => [
    m.id,
    m.state,
    m.phase,
    m.source ?? '-',
    m.target ?? '-',
    m.rows === undefined ? (m.unreadable ? '?' : '-') : String(m.rows),
    shortTime(m.startedAt),
    shortTime(m.endedAt),
    // The root cause (a PostgreSQL message) says more than the wrapper around it.
    m.error ? oneLine(m.error.cause ?? m.error.message, ERROR_WIDTH) : m.unreadable ? '(encrypted)' : '',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const right = new Set([5]);
  const render = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : right.has(i) ? c.padStart(widths[i]) : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [render(header), ...lines.map(render)].join('\n');
}
