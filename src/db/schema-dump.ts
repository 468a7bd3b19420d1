/**
 * The source's schema objects as PostgreSQL's own `pg_dump` writes them (`objects: all`): a
 * schema-only dump of the chosen schemas into a temporary file, its table of contents
 * (`pg_restore -l`), and the SQL of a chosen list of its entries (`pg_restore -L`). Ferry writes
 * no DDL of its own for these objects; it only chooses entries and runs their statements.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { refusal } from './errors';
import { FAILURE } from '../core/failure-types';
import { QualifiedName } from '../core/identifiers';

const run = promisify(execFile);

/** The pg_dump and pg_restore the worker runs: FERRY_PG_BIN's, else the ones on the PATH. */
export function dumpTool(name: 'pg_dump' | 'pg_restore', env: NodeJS.ProcessEnv = process.env): string {
  return env.FERRY_PG_BIN ? join(env.FERRY_PG_BIN, name) : name;
}

/** The major version of the workers' pg_dump (`pg_dump (PostgreSQL) 15.20 …` → 15), or a refusal naming the fix. */
export async function pgDumpMajor(): Promise<number> {
  let out: string;
  try {
    out = (await run(dumpTool('pg_dump'), ['--version'])).stdout;
  } catch (err) {
    throw refusal(
      FAILURE.DumpUnavailable,
      `objects: all takes the objects' definitions from pg_dump, which the worker could not run (${(err as Error).message.split('\n')[0]}); ` +
        'install the PostgreSQL client tools on the workers (the worker image ships them) or point FERRY_PG_BIN at their directory',
    );
  }
  const match = /\(PostgreSQL\)\s+(\d+)/.exec(out);
  if (!match) throw refusal(FAILURE.DumpUnavailable, `objects: all: pg_dump --version printed "${out.trim()}", not a PostgreSQL version`);
  return Number(match[1]);
}

/**
 * libpq's connection from a postgres URL without its password (in PGPASSWORD instead, so it is
 * not on the process list).
 */
function connectionArgs(url: string): { dbname: string; env: NodeJS.ProcessEnv } {
  const parsed = new URL(url);
  const password = decodeURIComponent(parsed.password);
  parsed.password = '';
  return { dbname: parsed.toString(), env: { ...process.env, ...(password ? { PGPASSWORD: password } : {}) } };
}

export interface SchemaDump {
  /** The custom-format archive. */
  file: string;
  /** Removes the archive and its directory. */
  remove(): Promise<void>;
}

/** What a schema dump takes in (ObjectsPlan's fields). */
export interface DumpScope {
  schemas: string[];
  /** The source's extensions, so a column's extension type is there before its table. */
  extensions: string[];
  /** Tables of those schemas that are not moved. */
  excludedTables: QualifiedName[];
}

/**
 * `pg_dump --schema-only` of a scope into a temporary file; `lockWaitMs` bounds the wait for each
 * table's ACCESS SHARE lock.
 */
export async function dumpSchemas(url: string, { schemas, extensions, excludedTables }: DumpScope, lockWaitMs: number): Promise<SchemaDump> {
  const dir = await mkdtemp(join(tmpdir(), 'ferry-dump-'));
  const file = join(dir, 'schema.dump');
  const { dbname, env } = connectionArgs(url);
  const args = ['--schema-only', '--format=custom', `--file=${file}`, `--lock-wait-timeout=${lockWaitMs}`];
  for (const schema of schemas) args.push(`--schema=${exactPattern(schema)}`);
  for (const extension of extensions) args.push(`--extension=${exactPattern(extension)}`);
  for (const table of excludedTables) args.push(`--exclude-table=${exactPattern(table.schema)}.${exactPattern(table.name)}`);
  try {
    await run(dumpTool('pg_dump'), [...args, `--dbname=${dbname}`], { env, maxBuffer: 16 * 1024 * 1024 });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw new Error(`pg_dump of the source's schemas failed: ${((err as { stderr?: string }).stderr || (err as Error).message).trim()}`);
  }
  return { file, remove: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * A pg_dump name pattern that matches exactly `name`: quoted (case kept), its wildcards
 * (`*`, `?`) and dots quoted too — inside double quotes pg_dump takes them literally.
 */
function exactPattern(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** Opens a dump of `scope`, hands it to `work`, and removes it whatever happens. */
export async function withDump<T>(url: string, scope: DumpScope, lockWaitMs: number, work: (dump: SchemaDump) => Promise<T>): Promise<T> {
  const dump = await dumpSchemas(url, scope, lockWaitMs);
  try {
    return await work(dump);
  } finally {
    await dump.remove();
  }
}

/** One entry of an archive's table of contents, as `pg_restore -l` lists it. */
export interface TocEntry {
  /** The entry's dump id (what a `pg_restore -L` list names). */
  id: number;
  /** The catalog and oid of the object on the source; 0 for entries that are not objects (COMMENT, ACL, …). */
  catalog: number;
  oid: number;
  /** The kind of entry: TABLE, VIEW, COMMENT, ACL, SEQUENCE OWNED BY, … */
  desc: string;
  /** The line as listed, for the `-L` list. */
  line: string;
}

/** The kinds pg_restore lists, longest first (some are prefixes of others). */
const DESCS = [
  'MATERIALIZED VIEW DATA', 'MATERIALIZED VIEW', 'SEQUENCE OWNED BY', 'SEQUENCE SET', 'FK CONSTRAINT', 'DEFAULT ACL', 'ROW SECURITY',
  'EVENT TRIGGER', 'TABLE ATTACH', 'INDEX ATTACH', 'TABLE DATA', 'SHELL TYPE', 'TEXT SEARCH CONFIGURATION', 'TEXT SEARCH DICTIONARY',
  'TEXT SEARCH PARSER', 'TEXT SEARCH TEMPLATE', 'OPERATOR CLASS', 'OPERATOR FAMILY', 'FOREIGN DATA WRAPPER', 'FOREIGN TABLE',
  'PUBLICATION TABLE', 'PUBLICATION TABLES IN SCHEMA', 'ACCESS METHOD', 'USER MAPPING', 'PROCEDURAL LANGUAGE', 'LARGE OBJECT',
  'SERVER', 'AGGREGATE', 'CAST', 'COLLATION', 'COMMENT', 'CONSTRAINT', 'CONVERSION', 'DEFAULT', 'DOMAIN', 'EXTENSION', 'FUNCTION',
  'INDEX', 'OPERATOR', 'POLICY', 'PROCEDURE', 'PUBLICATION', 'RULE', 'SCHEMA', 'SECURITY LABEL', 'SEQUENCE', 'STATISTICS',
  'SUBSCRIPTION', 'TABLE', 'TRANSFORM', 'TRIGGER', 'TYPE', 'VIEW', 'ACL',
].sort((a, b) => b.length - a.length);

/** The archive's entries in restore order (`pg_restore -l`). */
export async function tableOfContents(dump: SchemaDump): Promise<TocEntry[]> {
  const { stdout } = await run(dumpTool('pg_restore'), ['--list', dump.file], { maxBuffer: 256 * 1024 * 1024 });
  return parseTableOfContents(stdout);
}

/** `pg_restore -l`'s lines as entries: `<id>; <catalog> <oid> <DESC> <schema> <tag> <owner>`. */
export function parseTableOfContents(listing: string): TocEntry[] {
  const entries: TocEntry[] = [];
  for (const line of listing.split('\n')) {
    const match = /^(\d+); (\d+) (\d+) (.*)$/.exec(line);
    if (!match) continue; // comments (`;`) and blank lines
    const desc = DESCS.find((d) => match[4].startsWith(`${d} `));
    if (!desc) throw new Error(`pg_restore listed an entry of a kind Ferry does not know: ${line}`);
    entries.push({ id: Number(match[1]), catalog: Number(match[2]), oid: Number(match[3]), desc, line });
  }
  return entries;
}

/** The SQL of `entries` (in their archive order), as `pg_restore -L` writes it. */
export async function entriesSql(dump: SchemaDump, entries: TocEntry[]): Promise<string> {
  if (entries.length === 0) return '';
  const list = `${dump.file}.list-${entries[0].id}-${entries.length}`;
  await writeFile(list, `${entries.map((e) => e.line).join('\n')}\n`);
  try {
    const { stdout } = await run(dumpTool('pg_restore'), [`--use-list=${list}`, '--file=-', dump.file], { maxBuffer: 512 * 1024 * 1024 });
    return stdout;
  } finally {
    await rm(list, { force: true });
  }
}
