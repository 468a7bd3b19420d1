/**
 * A database's entry in PgBouncer's `[databases]` section (`app = host=db1 port=5432
 * dbname=app pool_size=20`), found, read and rewritten as text: the switch points the entry at
 * another server and keeps every other setting of it (pool size, auth user, client encoding…).
 * Pure module.
 */

/** Where an entry's connection goes; user and password as the new server's URL names them. */
export interface EntryServer {
  host: string;
  port: number;
  dbname: string;
  user?: string;
  password?: string;
}

/** The line of `database`'s entry in `text` (its index among the lines), or undefined. */
export function findEntry(text: string, database: string): { index: number; line: string } | undefined {
  const lines = text.split('\n');
  for (const [index, line] of lines.entries()) {
    const match = /^\s*("?)([^"=\s]+)\1\s*=/.exec(line);
    if (match && match[2] === database) return { index, line };
  }
  return undefined;
}

/** `key=value` pairs of an entry's value, in order; values may be single-quoted ('a b', 'it''s'). */
export function entrySettings(line: string): [string, string][] {
  const value = line.slice(line.indexOf('=') + 1);
  const settings: [string, string][] = [];
  const pattern = /([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^']|'')*'|\S*)/g;
  for (const match of value.matchAll(pattern)) {
    const raw = match[2];
    settings.push([match[1], raw.startsWith("'") ? raw.slice(1, -1).replace(/''/g, "'") : raw]);
  }
  return settings;
}

function quoted(value: string): string {
  return /^[^\s'=]+$/.test(value) ? value : `'${value.replace(/'/g, "''")}'`;
}

/**
 * The entry pointed at `server`: host, port and dbname replaced or added; user and password
 * replaced only where the entry names them (an entry without them lets each client connect as
 * itself, and still does); the rest kept.
 */
export function repointedEntry(line: string, database: string, server: EntryServer): string {
  const replaced: Record<string, string | undefined> = { host: server.host, port: String(server.port), dbname: server.dbname, user: server.user, password: server.password };
  const settings = entrySettings(line).map(([key, value]): [string, string] => [key, replaced[key] ?? value]);
  for (const key of ['host', 'port', 'dbname']) {
    const value = replaced[key];
    if (value !== undefined && !settings.some(([k]) => k === key)) settings.push([key, value]);
  }
  const name = /^[A-Za-z0-9_]+$/.test(database) ? database : `"${database}"`;
  return `${name} = ${settings.map(([key, value]) => `${key}=${quoted(value)}`).join(' ')}`;
}

/** `text` with line `index` replaced. */
export function withLine(text: string, index: number, line: string): string {
  const lines = text.split('\n');
  lines[index] = line;
  return lines.join('\n');
}
