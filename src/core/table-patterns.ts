/**
 * Table patterns of a spec's `tables:` and `exclude:` — `public.*`, `billing.invoice_*`, `*.*`,
 * or `all` — and the rule that picks source tables with them. A pattern is schema.table, each
 * part a glob (`*` any run of characters, `?` one) of an unquoted name, folded to lower case as
 * PostgreSQL folds it, or a quoted identifier, taken literally (`"Sales*".orders` names a schema
 * with a star in it). System schemas (`pg_*`, information_schema) and Ferry's own (`_ferry*`)
 * are never chosen, whatever the pattern. Pure module: patterns travel in the spec as text.
 */
import { MAX_IDENTIFIER_BYTES, QualifiedName } from './identifiers';

/** One part of a pattern: a literal name, or a glob over names. */
export interface NamePart {
  text: string;
  glob: boolean;
}

export interface TablePattern {
  /** As written in the spec (`all` is `*.*`). */
  text: string;
  schema: NamePart;
  name: NamePart;
}

/** Whether spec text is meant as a pattern: `all`, or a `*` or `?` outside double quotes. */
export function isPattern(text: string): boolean {
  if (text === 'all') return true;
  let quoted = false;
  for (const ch of text) {
    if (ch === '"') quoted = !quoted;
    else if (!quoted && (ch === '*' || ch === '?')) return true;
  }
  return false;
}

/** A pattern, or the reason the text is not one. */
export function parseTablePattern(text: string): TablePattern | string {
  const source = text === 'all' ? '*.*' : text;
  const parts: NamePart[] = [];
  let i = 0;
  while (i <= source.length) {
    const part = readPart(source, i);
    if (typeof part === 'string') return part;
    parts.push(part.part);
    i = part.next;
    if (i === source.length) break;
    if (source[i] !== '.') return PATTERN_SHAPE;
    i += 1;
  }
  if (parts.length !== 2) return PATTERN_SHAPE;
  return { text, schema: parts[0], name: parts[1] };
}

const PATTERN_SHAPE = 'must be a pattern schema.table, each part a name or a glob with * and ? (public.*, billing.invoice_*, *.*), or all';

function readPart(text: string, at: number): { part: NamePart; next: number } | string {
  if (text[at] === '"') {
    let j = at + 1;
    let name = '';
    for (;;) {
      if (j >= text.length) return 'has an unterminated quoted identifier';
      if (text[j] === '"' && text[j + 1] === '"') {
        name += '"';
        j += 2;
      } else if (text[j] === '"') break;
      else name += text[j++];
    }
    if (name.length === 0) return 'has an empty quoted identifier';
    if (new TextEncoder().encode(name).length > MAX_IDENTIFIER_BYTES) return `has an identifier longer than ${MAX_IDENTIFIER_BYTES} bytes`;
    return { part: { text: name, glob: false }, next: j + 1 };
  }
  const m = /^[A-Za-z0-9_$*?]+/.exec(text.slice(at));
  if (!m) return PATTERN_SHAPE;
  const glob = /[*?]/.test(m[0]);
  if (!glob && !/^[A-Za-z_]/.test(m[0])) return PATTERN_SHAPE;
  return { part: { text: m[0].toLowerCase(), glob }, next: at + m[0].length };
}

/** A part as a test of a name: a glob compiled once, a literal compared. */
function partMatcher(part: NamePart): (name: string) => boolean {
  if (!part.glob) return (name) => part.text === name;
  const regex = new RegExp(`^${part.text.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`);
  return (name) => regex.test(name);
}

/** A pattern as a test of a table, its globs compiled once for every table it is tried on. */
function patternMatcher(pattern: TablePattern): (table: QualifiedName) => boolean {
  const schema = partMatcher(pattern.schema);
  const name = partMatcher(pattern.name);
  return (table) => schema(table.schema) && name(table.name);
}

/** Schemas no pattern chooses from: PostgreSQL's own and Ferry's bookkeeping. */
export function isReservedSchema(schema: string): boolean {
  return schema.startsWith('pg_') || schema === 'information_schema' || schema.startsWith('_ferry');
}

/**
 * The tables the patterns choose among `candidates` (the source's tables, in the order they are
 * to be moved): those an include pattern matches and no exclude pattern does, outside the
 * reserved schemas, with the include pattern that chose each.
 */
export function chooseTables(
  candidates: QualifiedName[],
  include: TablePattern[],
  exclude: TablePattern[],
): { table: QualifiedName; pattern: TablePattern }[] {
  const includes = include.map((pattern) => ({ pattern, matches: patternMatcher(pattern) }));
  const excludes = exclude.map(patternMatcher);
  const chosen: { table: QualifiedName; pattern: TablePattern }[] = [];
  for (const table of candidates) {
    if (isReservedSchema(table.schema)) continue;
    const found = includes.find((p) => p.matches(table));
    if (found && !excludes.some((matches) => matches(table))) chosen.push({ table, pattern: found.pattern });
  }
  return chosen;
}

/**
 * The schemas (among `schemas`) that a pattern chooses whole — `all`, `app.*`, `tenant_*.*`: its
 * table part is `*` — and no exclude pattern takes out whole. `objects: all` moves their other
 * objects even where they hold no table (a schema of views or functions).
 */
export function chooseSchemas(schemas: string[], include: TablePattern[], exclude: TablePattern[]): string[] {
  const whole = (p: TablePattern) => p.name.glob && p.name.text === '*';
  const includes = include.filter(whole).map((p) => partMatcher(p.schema));
  const excludes = exclude.filter(whole).map((p) => partMatcher(p.schema));
  return schemas.filter((s) => !isReservedSchema(s) && includes.some((m) => m(s)) && !excludes.some((m) => m(s)));
}
