/**
 * `objects: all` in the migration's steps (src/db/schema-objects.ts): preflight's plan and checks
 * of the chosen schemas' other objects, and the first pass, which prepareTarget runs in its
 * transaction before the tables. Each pass returns what it created, for rollback's record.
 */
import { ClientBase } from 'pg';
import { displayQualified, QualifiedName, sameName } from '../core/identifiers';
import { MigrationPlan, ObjectsPlan, TablePlan } from '../core/plan';
import { FAILURE } from '../core/failure-types';
import { Spec } from '../core/spec';
import { chooseSchemas } from '../core/table-patterns';
import { listTables, partitionsOf } from './catalog';
import { refusal } from './errors';
import { DumpScope, entriesSql, pgDumpMajor, SchemaDump, tableOfContents, TocEntry, withDump } from './schema-dump';
import {
  createdSince,
  extensionsCreated,
  ObjectAddress,
  objectPasses,
  ownObjects,
  rolesNamed,
  runStatements,
  scriptStatements,
  standaloneSequences,
  Statement,
  tableProperties,
} from './schema-objects';
import { DEFAULT_TIMEOUTS } from './session';

export const sourceTables = (tables: Pick<TablePlan, 'source'>[]): QualifiedName[] => tables.map((t) => t.source);

/**
 * Preflight for `objects: all`: what the dump holds and which pass restores it, and a refusal
 * (naming each) for what cannot work — a renamed table, an old pg_dump, roles the target lacks or
 * Ferry cannot act as, extensions the target cannot create.
 */
export async function planObjects(source: ClientBase, target: ClientBase, sourceUrl: string, spec: Spec, plan: MigrationPlan): Promise<ObjectsPlan> {
  const renamed = plan.tables.filter((t) => !sameName(t.source, t.target));
  if (renamed.length > 0) {
    throw refusal(
      FAILURE.Refused,
      `objects: all makes the source's views, functions and triggers on the target, and they name tables as the source does; ` +
        `${renamed.map((t) => `${displayQualified(t.source)} → ${displayQualified(t.target)}`).join(', ')} would break them: move these tables under their own names, or use objects: tables`,
    );
  }
  if (spec.mode === 'online' && plan.targetReplicaRole === false) {
    throw refusal(
      FAILURE.TargetTriggersFire,
      'objects: all puts the source\'s triggers and rules on the target while the sync still writes there, and Ferry cannot write as a replica (session_replication_role) on it, so they would fire; grant that (GRANT SET ON PARAMETER session_replication_role) or use objects: tables',
    );
  }
  await assertDumpVersion(source);
  const scope = await dumpScope(source, spec, plan.tables);
  await assertLockRoom(source, scope.schemas, scope.excludedTables.length);
  return withDump(sourceUrl, scope, DEFAULT_TIMEOUTS.lockTimeoutMs, async (dump) => {
    const entries = await tableOfContents(dump);
    const passes = await objectPasses(source, sourceTables(plan.tables), entries);
    const roles = new Set<string>();
    const extensions: string[] = [];
    for await (const statements of entryStatements(dump, [...passes.before, ...passes.after])) {
      for (const role of rolesNamed(statements)) roles.add(role);
      extensions.push(...extensionsCreated(statements));
    }
    await assertRoles(source, target, roles, sourceTables(plan.tables));
    await assertExtensions(target, extensions);
    const kinds: Record<string, number> = {};
    for (const e of [...passes.before, ...passes.after]) kinds[e.desc] = (kinds[e.desc] ?? 0) + 1;
    return { ...scope, before: passes.before.length, after: passes.after.length, kinds, sequences: await standaloneSequences(source, scope.schemas) };
  });
}

/** Of the source's lock table, what one pg_dump may take (the rest is the application's and Ferry's own sessions'). */
export const DUMP_LOCK_SHARE = 0.75;

/**
 * pg_dump locks every table it dumps, in one transaction, and the lock table is the server's:
 * max_locks_per_transaction × (max_connections + max_prepared_transactions) locks for all its
 * sessions. A dump of more tables than that has room for ends in "out of shared memory", as
 * `pgcopydb clone` of 10,000 tables did here: refused in preflight with the setting to raise.
 */
async function assertLockRoom(source: ClientBase, schemas: string[], excluded: number): Promise<void> {
  const { rows } = await source.query<{ tables: number; room: number; sessions: number }>(
    `SELECT (SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = ANY ($1) AND c.relkind IN ('r', 'p'))::int AS tables,
            current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int AS sessions,
            current_setting('max_locks_per_transaction')::int * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int) AS room`,
    [schemas],
  );
  const tables = rows[0].tables - excluded;
  if (tables <= rows[0].room * DUMP_LOCK_SHARE) return;
  const needed = Math.ceil(tables / DUMP_LOCK_SHARE / rows[0].sessions / 64) * 64;
  throw refusal(
    FAILURE.Refused,
    `objects: all reads the definitions with pg_dump, which locks each of the ${tables} tables it dumps in one transaction, and the source's lock table has room for ${rows[0].room} locks ` +
      `(max_locks_per_transaction × (max_connections + max_prepared_transactions)) for every session: raise max_locks_per_transaction on the source to ${needed} or more (it takes a restart), or move fewer tables with objects: all`,
  );
}

async function assertDumpVersion(source: ClientBase): Promise<void> {
  const major = await pgDumpMajor();
  const { rows } = await source.query<{ v: number }>(`SELECT current_setting('server_version_num')::int AS v`);
  const sourceMajor = Math.floor(rows[0].v / 10_000);
  if (major < sourceMajor) {
    throw refusal(
      FAILURE.DumpUnavailable,
      `objects: all needs a pg_dump at least as new as the source (PostgreSQL ${sourceMajor}); the workers have pg_dump ${major}: ` +
        `install the PostgreSQL ${sourceMajor} client tools on the workers, or point FERRY_PG_BIN at their directory`,
    );
  }
}

/**
 * The schemas of the moved tables and those a pattern chooses whole (`all`, `app.*`), the
 * source's extensions, and the tables of those schemas that are not moved — with the partitions
 * of each partitioned one: pg_dump before 16 excludes a table without its partitions, and would
 * dump them with their indexes, constraints and comments.
 */
async function dumpScope(source: ClientBase, spec: Spec, tables: TablePlan[]): Promise<DumpScope> {
  const { rows: all } = await source.query<{ name: string }>('SELECT nspname AS name FROM pg_catalog.pg_namespace ORDER BY nspname COLLATE "C"');
  const whole = spec.selection ? chooseSchemas(all.map((r) => r.name), spec.selection.include.map((i) => i.pattern), spec.selection.exclude) : [];
  const schemas = [...new Set([...tables.map((t) => t.source.schema), ...whole])];
  const moved = new Set(tables.map((t) => displayQualified(t.source)));
  const notMoved = (await listTables(source)).filter((t) => schemas.includes(t.schema) && !moved.has(displayQualified(t)));
  const excludedTables = [...notMoved, ...(await partitionsOf(source, notMoved))].sort(byName);
  const { rows } = await source.query<{ name: string }>(`SELECT extname AS name FROM pg_catalog.pg_extension WHERE extname <> 'plpgsql' ORDER BY extname`);
  return { schemas, extensions: rows.map((r) => r.name), excludedTables };
}

/** By schema, then name (JavaScript's string order). */
function byName(a: QualifiedName, b: QualifiedName): number {
  const x = `${a.schema}\0${a.name}`;
  const y = `${b.schema}\0${b.name}`;
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * Roles are global: Ferry does not create them. Every role an object names (owners, grantees,
 * policies) must exist on the target, and Ferry's role there must be able to act as each owner
 * (a superuser, or a member of it) to give it its objects.
 */
async function assertRoles(source: ClientBase, target: ClientBase, roles: Set<string>, tables: QualifiedName[]): Promise<void> {
  const named = new Set(roles);
  for (const { owner } of await tableProperties(source, tables)) named.add(owner);
  const { rows } = await target.query<{ name: string; present: boolean; member: boolean }>(
    `SELECT r.name, a.oid IS NOT NULL AS present, a.oid IS NOT NULL AND pg_catalog.pg_has_role(current_user, a.oid, 'MEMBER') AS member
       FROM unnest($1::text[]) AS r(name) LEFT JOIN pg_catalog.pg_roles a ON a.rolname = r.name ORDER BY r.name`,
    [[...named]],
  );
  const missing = rows.filter((r) => !r.present).map((r) => r.name);
  if (missing.length > 0) {
    throw refusal(
      FAILURE.MissingRole,
      `objects: all: the source's objects name roles the target does not have: ${missing.join(', ')}; roles belong to the whole server, so Ferry does not create them — ` +
        'create them on the target (pg_dumpall --roles-only on the source lists them), then start again',
    );
  }
  const foreign = rows.filter((r) => !r.member).map((r) => r.name);
  if (foreign.length > 0) {
    throw refusal(
      FAILURE.MissingRole,
      `objects: all gives each object its owner, and Ferry's role on the target is neither a superuser nor a member of ${foreign.join(', ')}; ` +
        `grant ${foreign.join(', ')} to Ferry's role on the target, or run Ferry there as a superuser`,
    );
  }
}

async function assertExtensions(target: ClientBase, wanted: string[]): Promise<void> {
  if (wanted.length === 0) return;
  const { rows } = await target.query<{ name: string }>(
    `SELECT w.name FROM unnest($1::text[]) AS w(name) WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions e WHERE e.name = w.name)`,
    [wanted],
  );
  if (rows.length > 0) {
    throw refusal(
      FAILURE.IncompatibleTarget,
      `objects: all: the source uses extensions the target's server cannot create: ${rows.map((r) => r.name).join(', ')}; install them on the target's server (their packages), then start again`,
    );
  }
}

/**
 * Dump entries whose SQL is parsed at once at most. PostgreSQL's parser runs in WebAssembly, whose
 * memory grows to the largest script it is given and is never handed back: the 20,000 statements
 * of 10,000 views in one script left a worker about 145 MB larger for good. Each part costs a
 * pg_restore, which reads the archive's whole table of contents (tenths of a second at 40,000
 * entries).
 */
export const PARSE_PART = 1000;

/** The statements of `entries`, in the archive's order, parsed PARSE_PART entries at a time. */
export async function* entryStatements(dump: SchemaDump, entries: TocEntry[]): AsyncGenerator<Statement[]> {
  for (let first = 0; first < entries.length; first += PARSE_PART) {
    yield await scriptStatements(await entriesSql(dump, entries.slice(first, first + PARSE_PART)));
  }
}

/** One pass (or part of one): its statements run in the caller's transaction, then `extra`; what it created, oldest first. */
export async function restorePass(db: ClientBase, parts: AsyncIterable<Statement[]>, extra: string[] = []): Promise<ObjectAddress[]> {
  const before = await ownObjects(db);
  for await (const statements of parts) await runStatements(db, statements);
  for (const statement of extra) await db.query(statement);
  return createdSince(db, before);
}

/**
 * The first pass, in prepareTarget's transaction before the tables: what the tables may need
 * (schemas, extensions, types, functions, standalone sequences, …).
 */
export async function restoreBefore(source: ClientBase, target: ClientBase, sourceUrl: string, plan: MigrationPlan): Promise<ObjectAddress[]> {
  const objects = plan.objects!;
  return withDump(sourceUrl, objects, DEFAULT_TIMEOUTS.lockTimeoutMs, async (dump) => {
    const passes = await objectPasses(source, sourceTables(plan.tables), await tableOfContents(dump));
    return restorePass(target, entryStatements(dump, passes.before));
  });
}
