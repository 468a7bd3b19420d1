/**
 * `objects: all`: which of a schema dump's entries the target gets, and when, and how their
 * statements run (src/db/schema-dump.ts runs pg_dump). Ferry keeps making the moved tables itself
 * — their columns, key after the load, indexes, foreign keys, owned sequences, partitions — and
 * takes everything else from the dump, in two passes: what the tables may need before them
 * (schemas, extensions, types, domains, functions, standalone sequences, …) and what needs the
 * tables after the load (views, materialized views, triggers, rules, policies, comments, grants,
 * ownership). Which entry needs a moved table is read from the source's pg_depend, not from the
 * SQL.
 */
import { ClientBase } from 'pg';
import { QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import { TocEntry } from './schema-dump';
import { loadParser } from '../sql-parser';

// The parser's tree, as JSON: loosely typed on purpose (its node types are many and we read few).
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Node = any;

/** The moved tables (and every partition under them) on the source. */
const MOVED_CTE = `moved AS (
  SELECT p.relid::oid AS oid FROM unnest($1::text[]) AS t(name), pg_catalog.pg_partition_tree(t.name::regclass) AS p
  UNION SELECT t.name::regclass::oid FROM unnest($1::text[]) AS t(name))`;

/**
 * The source objects Ferry makes itself for the moved tables — the relations, their indexes,
 * constraints, defaults and owned sequences — and its own triggers there (online capture and the
 * freeze, whose functions live in Ferry's schemas): none is taken from the dump.
 */
const FERRY_MADE_SQL = `
WITH ${MOVED_CTE}
SELECT 'pg_class'::regclass::oid::text AS catalog, oid::text FROM moved
UNION ALL SELECT 'pg_class'::regclass::oid::text, indexrelid::text FROM pg_catalog.pg_index WHERE indrelid IN (SELECT oid FROM moved)
UNION ALL SELECT 'pg_constraint'::regclass::oid::text, oid::text FROM pg_catalog.pg_constraint WHERE conrelid IN (SELECT oid FROM moved)
UNION ALL SELECT 'pg_attrdef'::regclass::oid::text, oid::text FROM pg_catalog.pg_attrdef WHERE adrelid IN (SELECT oid FROM moved)
UNION ALL SELECT 'pg_class'::regclass::oid::text, d.objid::text
  FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S'
 WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid IN (SELECT oid FROM moved) AND d.deptype IN ('a', 'i')
UNION ALL SELECT 'pg_trigger'::regclass::oid::text, t.oid::text
  FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc f ON f.oid = t.tgfoid JOIN pg_catalog.pg_namespace n ON n.oid = f.pronamespace
 WHERE t.tgrelid IN (SELECT oid FROM moved) AND n.nspname LIKE '\\_ferry%'`;

/**
 * Every object that needs a moved table, however indirectly: what depends on it, and what depends
 * on that. An object's internal parts count as the object (a view's rule is the view, a table's
 * row type is the table), both ways.
 */
const DEPENDENTS_SQL = `
WITH RECURSIVE ${MOVED_CTE},
reached(catalog, oid) AS (
  SELECT 'pg_class'::regclass::oid, oid FROM moved
  UNION
  SELECT CASE WHEN d.deptype = 'i' THEN d.classid ELSE coalesce(w.refclassid, d.classid) END,
         CASE WHEN d.deptype = 'i' THEN d.objid ELSE coalesce(w.refobjid, d.objid) END
    FROM pg_catalog.pg_depend d
    JOIN reached r ON d.refclassid = r.catalog AND d.refobjid = r.oid
    LEFT JOIN pg_catalog.pg_depend w ON w.classid = d.classid AND w.objid = d.objid AND w.deptype = 'i' AND d.deptype <> 'i')
SELECT catalog::text, oid::text FROM reached`;

/**
 * Entries never taken from the dump: those that restate what Ferry makes of a table, and
 * replication's own (a publication or subscription belongs to the source's replication set-up).
 */
const TABLE_PARTS = new Set([
  'SEQUENCE OWNED BY', 'TABLE ATTACH', 'INDEX ATTACH', 'SEQUENCE SET', 'TABLE DATA', 'MATERIALIZED VIEW DATA',
  'PUBLICATION', 'PUBLICATION TABLE', 'PUBLICATION TABLES IN SCHEMA', 'SUBSCRIPTION',
]);
/** Kinds that pg_dump puts after the data: always in the second pass. */
const POST_DATA = new Set(['CONSTRAINT', 'FK CONSTRAINT', 'INDEX', 'TRIGGER', 'RULE', 'POLICY', 'ROW SECURITY', 'EVENT TRIGGER', 'STATISTICS']);

export interface ObjectPasses {
  /** Before the tables are created. */
  before: TocEntry[];
  /** Once the tables are loaded (their keys and indexes built). */
  after: TocEntry[];
}

const key = (catalog: number | string, oid: number | string) => `${catalog}/${oid}`;

async function oidSet(db: ClientBase, sql: string, tables: QualifiedName[]): Promise<Set<string>> {
  const { rows } = await db.query<{ catalog: string; oid: string }>(sql, [tables.map(quoteQualified)]);
  return new Set(rows.map((r) => key(r.catalog, r.oid)));
}

/**
 * The dump's entries in two passes (and none of what Ferry makes). An entry that is not an
 * object (a COMMENT, an ACL) follows the object listed before it, as pg_dump lists it; the
 * comments and grants of a moved table or column come in the second pass.
 */
export async function objectPasses(source: ClientBase, tables: QualifiedName[], entries: TocEntry[]): Promise<ObjectPasses> {
  const made = await oidSet(source, FERRY_MADE_SQL, tables);
  const needsTables = await oidSet(source, DEPENDENTS_SQL, tables);
  const passes: ObjectPasses = { before: [], after: [] };
  let parent: 'made' | 'before' | 'after' = 'before';
  for (const entry of entries) {
    if (TABLE_PARTS.has(entry.desc)) {
      if (entry.catalog !== 0) parent = 'made'; // a comment on it follows it out
    } else if (entry.catalog !== 0) {
      const id = key(entry.catalog, entry.oid);
      parent = made.has(id) ? 'made' : needsTables.has(id) || POST_DATA.has(entry.desc) ? 'after' : 'before';
      if (parent !== 'made') passes[parent].push(entry);
    } else {
      passes[parent === 'before' && !POST_DATA.has(entry.desc) ? 'before' : 'after'].push(entry);
    }
  }
  return passes;
}

/** One statement of a script, with its parse tree. */
export interface Statement {
  text: string;
  tree: Node;
}


/**
 * A pg_restore script as statements, split by PostgreSQL's own parser. Its `\restrict` and
 * `\unrestrict` lines are psql meta-commands (they guard a script fed to psql), not SQL.
 */
export async function scriptStatements(script: string): Promise<Statement[]> {
  const sql = script.replace(/^\\(un)?restrict [A-Za-z0-9]+$/gm, '');
  const { parse } = await loadParser();
  const tree = await parse(sql);
  const bytes = Buffer.from(sql, 'utf8');
  return (tree.stmts ?? []).map((s: Node) => {
    const start = s.stmt_location ?? 0;
    const end = s.stmt_len ? start + s.stmt_len : bytes.length;
    return { text: bytes.subarray(start, end).toString('utf8').trim(), tree: s.stmt };
  });
}

/** Settings of the script that would undo the session's own timeouts, or that need not be set. */
const SKIPPED_SETTINGS = new Set(['statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout', 'client_encoding', 'client_min_messages']);

/**
 * Runs a script's statements in the caller's transaction. Its settings hold for the transaction
 * only (SET LOCAL), and those that would lift the session's lock and statement timeouts are left
 * out: a definition waits for a lock no longer than anything else Ferry does. A schema the
 * target has already is not created again.
 */
export async function runStatements(db: ClientBase, statements: Statement[]): Promise<void> {
  // pg_dump creates every schema it dumps, `public` too; one the target has already is kept
  // (its owner, comment and grants still follow from the dump).
  const { rows } = await db.query<{ name: string }>('SELECT nspname AS name FROM pg_catalog.pg_namespace');
  const existing = new Set(rows.map((r) => r.name));
  for (const { text, tree } of statements) {
    if (tree.CreateSchemaStmt && existing.has(tree.CreateSchemaStmt.schemaname)) continue;
    if (tree.VariableSetStmt) {
      if (SKIPPED_SETTINGS.has(tree.VariableSetStmt.name)) continue;
      await db.query(text.replace(/^SET\s+/i, 'SET LOCAL '));
      continue;
    }
    const setting = sessionSetConfig(tree);
    if (setting) {
      await db.query('SELECT pg_catalog.set_config($1, $2, true)', setting);
      continue;
    }
    await db.query(text);
  }
}

/** `SELECT pg_catalog.set_config('search_path', '', false)` (how pg_dump empties the search path) as its name and value. */
function sessionSetConfig(tree: Node): [string, string] | null {
  const targets = tree.SelectStmt?.targetList;
  if (!targets || targets.length !== 1 || tree.SelectStmt.fromClause) return null;
  const call = targets[0].ResTarget?.val?.FuncCall;
  const name = (call?.funcname ?? []).map((n: Node) => n.String?.sval).join('.');
  if (name !== 'pg_catalog.set_config' || call.args?.length !== 3) return null;
  const [setting, value] = call.args.map((a: Node) => a.A_Const?.sval?.sval);
  return typeof setting === 'string' && typeof value === 'string' ? [setting, value] : null;
}

/** Every role the statements name (owners, grantees, policies' roles), PUBLIC and CURRENT_USER aside. */
export function rolesNamed(statements: Statement[]): Set<string> {
  const roles = new Set<string>();
  const walk = (node: Node): void => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node && typeof node === 'object') {
      if (node.roletype === 'ROLESPEC_CSTRING' && typeof node.rolename === 'string') roles.add(node.rolename);
      Object.values(node).forEach(walk);
    }
  };
  statements.forEach((s) => walk(s.tree));
  return roles;
}

/** The extensions the statements create. */
export function extensionsCreated(statements: Statement[]): string[] {
  return statements.filter((s) => s.tree.CreateExtensionStmt).map((s) => s.tree.CreateExtensionStmt.extname as string);
}

/** The moved tables' owners and replica identities on the source (each partition its own), by name: the same on the target. */
export async function tableProperties(source: ClientBase, tables: QualifiedName[]): Promise<(QualifiedName & { owner: string; identity: string; identityIndex: string | null })[]> {
  const { rows } = await source.query<QualifiedName & { owner: string; identity: string; identityIndex: string | null }>(
    `WITH ${MOVED_CTE}
     SELECT n.nspname AS schema, c.relname AS name, pg_catalog.pg_get_userbyid(c.relowner) AS owner, c.relreplident::text AS identity,
            (SELECT ci.relname FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid
              WHERE i.indrelid = c.oid AND i.indisreplident) AS "identityIndex"
       FROM moved m JOIN pg_catalog.pg_class c ON c.oid = m.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      ORDER BY c.oid`,
    [tables.map(quoteQualified)],
  );
  return rows;
}

/**
 * Each moved table (and partition) given its source owner on the target, and its replica
 * identity where it is not the default (FULL, NOTHING, USING INDEX): both are the table's own
 * properties, which the dump's entries for the table (left out: Ferry made it) would have set.
 */
export async function tablePropertyStatements(source: ClientBase, tables: QualifiedName[]): Promise<string[]> {
  const identity = (r: { identity: string; identityIndex: string | null }) =>
    r.identity === 'f' ? 'FULL' : r.identity === 'n' ? 'NOTHING' : r.identity === 'i' && r.identityIndex ? `USING INDEX ${quoteIdent(r.identityIndex)}` : null;
  return (await tableProperties(source, tables)).flatMap((r) => [
    `ALTER TABLE ${quoteQualified(r)} OWNER TO ${quoteIdent(r.owner)}`,
    ...(identity(r) ? [`ALTER TABLE ${quoteQualified(r)} REPLICA IDENTITY ${identity(r)}`] : []),
  ]);
}

/** The materialized views among `entries`, by their source name (`"schema"."name"`), in dump order. */
export async function materializedViews(source: ClientBase, entries: TocEntry[]): Promise<string[]> {
  const oids = entries.filter((e) => e.desc === 'MATERIALIZED VIEW').map((e) => String(e.oid));
  if (oids.length === 0) return [];
  const { rows } = await source.query<{ oid: string; name: string }>(
    `SELECT c.oid::text, quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY($1::oid[])`,
    [oids],
  );
  const names = new Map(rows.map((r) => [r.oid, r.name]));
  return oids.map((oid) => names.get(oid)).filter((n): n is string => n !== undefined);
}

/** Sequences of the chosen schemas that no column owns: the cutover carries their positions. */
export async function standaloneSequences(source: ClientBase, schemas: string[]): Promise<QualifiedName[]> {
  const { rows } = await source.query<QualifiedName>(
    `SELECT n.nspname AS schema, c.relname AS name
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relkind = 'S' AND n.nspname = ANY($1::text[])
        AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                         WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
      ORDER BY n.nspname, c.relname`,
    [schemas],
  );
  return rows;
}

/**
 * The target's objects that a rollback would have to drop if a pass created them: schemas,
 * extensions, and whatever lives in a schema on its own (not a part of another object: an array
 * type, a view's row type or a domain's constraint goes with its owner).
 */
const OWN_OBJECTS_SQL = `
SELECT d.classid::text AS catalog, d.objid::text AS oid FROM pg_catalog.pg_depend d
 WHERE d.refclassid = 'pg_namespace'::regclass AND d.deptype = 'n'
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend x WHERE x.classid = d.classid AND x.objid = d.objid AND x.deptype IN ('i', 'a', 'e'))
UNION SELECT 'pg_namespace'::regclass::oid::text, oid::text FROM pg_catalog.pg_namespace
UNION SELECT 'pg_extension'::regclass::oid::text, oid::text FROM pg_catalog.pg_extension`;

/** An object as PostgreSQL names it for pg_get_object_address: what a rollback looks up. */
export interface ObjectAddress {
  type: string;
  names: string[];
  args: string[];
}

/** A snapshot of the target's own objects, to learn what a pass creates (createdSince). */
export async function ownObjects(db: ClientBase): Promise<Set<string>> {
  const { rows } = await db.query<{ catalog: string; oid: string }>(OWN_OBJECTS_SQL);
  return new Set(rows.map((r) => key(r.catalog, r.oid)));
}

/** What exists now and not in `before`, oldest first, as addresses. */
export async function createdSince(db: ClientBase, before: Set<string>): Promise<ObjectAddress[]> {
  const now = await ownObjects(db);
  const created = [...now].filter((k) => !before.has(k)).map((k) => k.split('/'));
  if (created.length === 0) return [];
  const { rows } = await db.query<ObjectAddress>(
    `SELECT a.type, a.object_names AS names, a.object_args AS args
       FROM unnest($1::oid[], $2::oid[]) WITH ORDINALITY AS o(catalog, oid, n),
            pg_catalog.pg_identify_object_as_address(o.catalog, o.oid, 0) AS a
      ORDER BY o.oid::int8`,
    [created.map((c) => c[0]), created.map((c) => c[1])],
  );
  return rows;
}
