/**
 * PostgreSQL identifiers: parsing the names a spec gives (`app."Order Lines"`) and quoting the
 * names that go into SQL. Every identifier in Ferry's SQL goes through `quoteIdent`.
 * Pure module: imported by workflows.
 */

export interface QualifiedName {
  schema: string;
  name: string;
}

export const MAX_IDENTIFIER_BYTES = 63;

export function quoteIdent(identifier: string): string {
  if (identifier.includes('\u0000')) throw new Error('identifier contains a NUL character');
  return `"${identifier.replace(/"/g, '""')}"`;
}

export function quoteQualified(q: QualifiedName): string {
  return `${quoteIdent(q.schema)}.${quoteIdent(q.name)}`;
}

const PLAIN = /^[a-z_][a-z0-9_$]*$/;

/** The name as a person would write it: quoted only where PostgreSQL needs quotes. */
export function displayIdent(identifier: string): string {
  return PLAIN.test(identifier) ? identifier : quoteIdent(identifier);
}

export function displayQualified(q: QualifiedName): string {
  return `${displayIdent(q.schema)}.${displayIdent(q.name)}`;
}

/**
 * Parses `schema.table` where either part may be a double-quoted identifier. Unquoted parts are
 * folded to lower case as PostgreSQL does. Returns an error message instead of throwing.
 */
export function parseQualifiedName(text: string): QualifiedName | string {
  const parts: string[] = [];
  let i = 0;
  while (i <= text.length) {
    let part: string;
    if (text[i] === '"') {
      let j = i + 1;
      part = '';
      for (;;) {
        if (j >= text.length) return 'has an unterminated quoted identifier';
        if (text[j] === '"') {
          if (text[j + 1] === '"') {
            part += '"';
            j += 2;
            continue;
          }
          break;
        }
        part += text[j];
        j += 1;
      }
      if (part.length === 0) return 'has an empty quoted identifier';
      i = j + 1;
    } else {
      const m = /^[A-Za-z_][A-Za-z0-9_$]*/.exec(text.slice(i));
      if (!m) {
        return 'must be schema.table; quote names with other characters, e.g. app."Order Lines"';
      }
      part = m[0].toLowerCase();
      i += m[0].length;
    }
    if (new TextEncoder().encode(part).length > MAX_IDENTIFIER_BYTES) {
      return `has an identifier longer than ${MAX_IDENTIFIER_BYTES} bytes`;
    }
    if (part.includes('\u0000')) return 'contains a NUL character';
    parts.push(part);
    if (i === text.length) break;
    if (text[i] !== '.') {
      return 'must be schema.table; quote names with other characters, e.g. app."Order Lines"';
    }
    i += 1;
  }
  if (parts.length !== 2) {
    return 'must be qualified as schema.table (for example public.orders)';
  }
  return { schema: parts[0], name: parts[1] };
}

/**
 * `identifier` followed by `suffix`, the identifier cut (on a character boundary) so that the
 * whole fits PostgreSQL's 63 bytes: a longer name would be truncated silently, suffix first.
 */
export function withSuffix(identifier: string, suffix: string): string {
  const encoder = new TextEncoder();
  const room = MAX_IDENTIFIER_BYTES - encoder.encode(suffix).length;
  let head = identifier;
  while (encoder.encode(head).length > room) head = Array.from(head).slice(0, -1).join('');
  return head + suffix;
}

export function sameName(a: QualifiedName, b: QualifiedName): boolean {
  return a.schema === b.schema && a.name === b.name;
}

/**
 * One identifier as a plan writes it: plain (folded to lower case, as PostgreSQL does) or
 * double-quoted. Anything else — spaces, semicolons, a second part — is refused, so SQL cannot
 * ride in on a name.
 */
export function parseIdentifier(text: string): { ok: true; name: string } | { ok: false; message: string } {
  let name: string;
  if (text.startsWith('"')) {
    if (text.length < 3 || !text.endsWith('"')) return { ok: false, message: 'has an unterminated or empty quoted identifier' };
    const inner = text.slice(1, -1);
    if (inner.replace(/""/g, '').includes('"')) return { ok: false, message: 'must be one identifier (a quote inside a quoted name is written "")' };
    name = inner.replace(/""/g, '"');
  } else {
    if (!/^[A-Za-z_][A-Za-z0-9_$]*$/.test(text)) {
      return { ok: false, message: 'must be one identifier (letters, digits, _ or $); quote other names, e.g. "Order Total"' };
    }
    name = text.toLowerCase();
  }
  if (name.includes('\u0000') || /[\p{Cc}]/u.test(name)) return { ok: false, message: 'contains a control character' };
  if (new TextEncoder().encode(name).length > MAX_IDENTIFIER_BYTES) return { ok: false, message: `is longer than ${MAX_IDENTIFIER_BYTES} bytes` };
  return { ok: true, name };
}
