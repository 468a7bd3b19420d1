/**
 * Links between the repository's markdown files that lead nowhere: a file that does not exist,
 * or an anchor (`#heading`) that no heading of the target makes under GitHub's slug rules.
 * test/unit/docs.test.ts runs it over README.md and docs/.
 */
import { posix } from 'node:path';

/** Text outside fenced code blocks, code spans replaced by a placeholder (links in code are not links). */
function prose(text: string): string[] {
  const lines: string[] = [];
  let fence: string | undefined;
  for (const line of text.split('\n')) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker && (!fence || marker.startsWith(fence))) {
      fence = fence ? undefined : marker;
      lines.push('');
      continue;
    }
    lines.push(fence ? '' : line.replace(/`+[^`]*`+/g, 'code'));
  }
  return lines;
}

/** GitHub's anchor for a heading's text: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/[*`]/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
}

/** Every anchor a markdown file has: its headings' slugs (the n-th repeat gets `-n`) and HTML ids. */
export function anchors(text: string): Set<string> {
  const found = new Set<string>();
  const counts = new Map<string, number>();
  let fence: string | undefined;
  for (const line of text.split('\n')) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker && (!fence || marker.startsWith(fence))) fence = fence ? undefined : marker;
    if (fence || marker) continue;
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading !== undefined) {
      const base = slug(heading);
      const n = counts.get(base) ?? 0;
      counts.set(base, n + 1);
      found.add(n ? `${base}-${n}` : base);
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) found.add(m[1]);
  }
  return found;
}

export interface Repository {
  exists(path: string): boolean;
  /** A markdown file's text, for its anchors. */
  read(path: string): string;
}

/** `path: [text](target) — why` for each link of the file (path from the root) that leads nowhere. */
export function brokenLinks(path: string, text: string, repo: Repository): string[] {
  const broken: string[] = [];
  for (const [i, line] of prose(text).entries()) {
    for (const m of line.matchAll(/!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = m[2];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const [file, anchor] = target.split('#', 2);
      const resolved = file ? posix.normalize(posix.join(posix.dirname(path), decodeURIComponent(file))) : path;
      const where = `${path}:${i + 1}: (${target})`;
      if (resolved.startsWith('..')) broken.push(`${where} leaves the repository`);
      else if (!repo.exists(resolved)) broken.push(`${where} — no file ${resolved}`);
      else if (anchor !== undefined && !resolved.endsWith('.md')) broken.push(`${where} — an anchor into a file that is not markdown`);
      else if (anchor !== undefined && !anchors(repo.read(resolved)).has(decodeURIComponent(anchor))) broken.push(`${where} — no heading #${anchor} in ${resolved}`);
    }
  }
  return broken;
}
