/**
 * What a plan's SQL would do to a large table, judged with PostgreSQL's own parser (libpg-query)
 * and the database's catalog: statements that take ACCESS EXCLUSIVE and then scan or rewrite
 * the table are refused with their safe form named — or, for SET NOT NULL, replaced by it. The
 * table of unsafe statements in docs/schema-changes.md lists the same cases as `judgeStatement` below.
 */
import { ClientBase } from 'pg';
import { QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import { loadParser } from '../sql-parser';

// The parser's tree, as JSON: loosely typed on purpose (its node types are many and we read few).
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Node = any;

export type Verdict =
  | { action: 'run' }
  /** SET NOT NULL in four short steps: CHECK … NOT VALID, VALIDATE, SET NOT NULL, DROP the CHECK. */
  | { action: 'setNotNull'; table: QualifiedName; column: string }
  | { action: 'refuse'; message: string };

/** The statements of `sql` as parse trees; an error message when it does not parse. */
export async function parseStatements(sql: string): Promise<Node[] | string> {
  const { parse } = await loadParser();
  try {
    const tree = await parse(sql);
    return (tree.stmts ?? []).map((s: Node) => s.stmt);
  } catch (err) {
    return `does not parse as PostgreSQL: ${(err as Error).message}`;
  }
}

/**
 * Every relation named anywhere in a tree: RangeVar nodes, whether wrapped (`{RangeVar: …}` in a
 * FROM list) or bare (an ALTER TABLE's `relation`).
 */
function rangeVars(node: Node, out: Node[] = []): Node[] {
  if (Array.isArray(node)) node.forEach((n) => rangeVars(n, out));
  else if (node && typeof node === 'object') {
    if (typeof node.relname === 'string') out.push(node);
    for (const value of Object.values(node)) rangeVars(value, out);
  }
  return out;
}

/** Every function a tree calls, by its last name part. */
function functionNames(node: Node, out: Set<string> = new Set()): Set<string> {
  if (Array.isArray(node)) node.forEach((n) => functionNames(n, out));
  else if (node && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      if (key === 'FuncCall') {
        const names = ((value as Node).funcname ?? []).map((n: Node) => n.String?.sval);
        if (names.length) out.add(names[names.length - 1]);
      }
      functionNames(value, out);
    }
  }
  return out;
}

function tableOf(rv: Node): QualifiedName {
  return { schema: rv.schemaname ?? 'public', name: rv.relname };
}

function typeNameText(typeName: Node): { name: string; typmods: number[] } {
  const names: string[] = (typeName.names ?? []).map((n: Node) => n.String?.sval);
  const typmods: number[] = (typeName.typmods ?? []).map((m: Node) => m.A_Const?.ival?.ival ?? 0);
  return { name: names.filter((n) => n !== 'pg_catalog').join('.'), typmods };
}

/** The parser's internal names of built-in types, as people write them. */
const SQL_TYPE_NAMES: Record<string, string> = { int8: 'bigint', int4: 'integer', int2: 'smallint', float8: 'double precision', float4: 'real', bool: 'boolean', bpchar: 'char' };

const SERIAL_TYPES = new Set(['serial', 'serial4', 'bigserial', 'serial8', 'smallserial', 'serial2']);

/** Refusals for the one-statement rule and what no step may hold, independent of the catalog. */
export function shapeRefusal(stmts: Node[], database: string): string | undefined {
  if (stmts.length === 0) return 'holds no statement';
  if (stmts.length > 1) return `holds ${stmts.length} statements; give each its own step (each step is one statement, with its own lock timeout and rollback)`;
  const stmt = stmts[0];
  const other = rangeVars(stmt).find((rv) => rv.catalogname !== undefined);
  if (other) {
    return `names database "${other.catalogname}" (${other.catalogname}.${other.schemaname}.${other.relname}); a change plan works on its one database (${database}): make a separate plan for the other`;
  }
  if (stmt.TransactionStmt) return 'controls the transaction; Ferry runs each step in its own transaction, leave BEGIN/COMMIT out';
  return undefined;
}

/**
 * Judges one parsed statement: run it as written, run its safe form (SET NOT NULL), or refuse
 * it with the safe form named. Reads the catalog for the facts a statement's text does not show
 * (whether a default's functions are volatile, a column's current type).
 */
export interface JudgeContext {
  /** An earlier step of the plan sets this column NOT NULL. */
  notNullEarlier?: (table: QualifiedName, column: string) => boolean;
}

export async function judgeStatement(db: ClientBase, stmt: Node, context: JudgeContext = {}): Promise<Verdict> {
  const refuse = (message: string): Verdict => ({ action: 'refuse', message });
  if (stmt.DoStmt) {
    return refuse('DO runs procedural code that preflight cannot judge (it can lift its own lock_timeout, rewrite a table, scan one under its lock): write each statement as its own sql step');
  }
  if (stmt.CallStmt) return refuse('CALL runs a procedure whose statements preflight cannot judge: write them as sql steps');
  if (stmt.SelectStmt) {
    const own = await databaseFunctions(db, functionCalls(stmt));
    if (own.length) {
      return refuse(`calls ${own.join(', ')}, a function of the database's own, whose statements preflight cannot judge (DDL inside would pass every check): write them as sql steps`);
    }
  }
  if ((stmt.UpdateStmt || stmt.DeleteStmt) && !(stmt.UpdateStmt ?? stmt.DeleteStmt).whereClause) {
    return refuse(
      stmt.UpdateStmt
        ? 'UPDATE without WHERE updates every row in one transaction, each row locked until it commits: use a backfill step (batches in key order, resumable)'
        : 'DELETE without WHERE deletes every row in one transaction, each row locked until it commits: delete in batches, or TRUNCATE if that is what is meant',
    );
  }
  if (stmt.RefreshMatViewStmt && !stmt.RefreshMatViewStmt.concurrent) {
    return refuse('REFRESH MATERIALIZED VIEW without CONCURRENTLY locks the view against every read while it runs: REFRESH MATERIALIZED VIEW CONCURRENTLY (the view needs a unique index)');
  }
  if (stmt.IndexStmt) {
    const s = stmt.IndexStmt;
    return refuse(
      `${s.concurrent ? 'CREATE INDEX CONCURRENTLY' : 'CREATE INDEX without CONCURRENTLY (it blocks every write to the table while it builds)'}: use an index step ` +
        `(index: { table, name, columns, unique }), which builds CONCURRENTLY and drops an INVALID index a failed attempt left before retrying`,
    );
  }
  if (stmt.ReindexStmt) {
    return refuse('REINDEX: use an index step with rebuild: true (REINDEX INDEX CONCURRENTLY)');
  }
  if (stmt.VacuumStmt && (stmt.VacuumStmt.options ?? []).some((o: Node) => o.DefElem?.defname === 'full')) {
    return refuse('VACUUM FULL rewrites the table under ACCESS EXCLUSIVE; no step runs it');
  }
  if (stmt.ClusterStmt) return refuse('CLUSTER rewrites the table under ACCESS EXCLUSIVE; no step runs it');
  if (!stmt.AlterTableStmt) return { action: 'run' };

  const alter = stmt.AlterTableStmt;
  const table = tableOf(alter.relation);
  const cmds: Node[] = (alter.cmds ?? []).map((c: Node) => c.AlterTableCmd);
  const setNotNull = cmds.filter((c) => c.subtype === 'AT_SetNotNull');
  if (setNotNull.length > 0) {
    if (cmds.length > 1) return refuse('SET NOT NULL together with other changes: give SET NOT NULL its own step, which Ferry runs in its safe form');
    return { action: 'setNotNull', table, column: setNotNull[0].name };
  }
  for (const cmd of cmds) {
    const verdict = await judgeAlterCommand(db, table, cmd, context);
    if (verdict) return verdict;
  }
  return { action: 'run' };
}

/** Every function a tree calls, as written (schema-qualified or not). */
function functionCalls(node: Node, out: { schema?: string; name: string }[] = []): { schema?: string; name: string }[] {
  if (Array.isArray(node)) node.forEach((n) => functionCalls(n, out));
  else if (node && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      if (key === 'FuncCall') {
        const names: string[] = ((value as Node).funcname ?? []).map((n: Node) => n.String?.sval);
        if (names.length) out.push({ name: names[names.length - 1], ...(names.length > 1 ? { schema: names[names.length - 2] } : {}) });
      }
      functionCalls(value, out);
    }
  }
  return out;
}

/** Those of `calls` that name a function outside pg_catalog (one the database's owners wrote). */
async function databaseFunctions(db: ClientBase, calls: { schema?: string; name: string }[]): Promise<string[]> {
  const suspects = calls.filter((c) => c.schema !== 'pg_catalog');
  if (suspects.length === 0) return [];
  const { rows } = await db.query<{ name: string }>(
    `SELECT DISTINCT n.nspname || '.' || p.proname AS name FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      WHERE p.proname = ANY ($1::text[]) AND n.nspname <> 'pg_catalog' ORDER BY 1`,
    [suspects.map((c) => c.name)],
  );
  return rows.map((r) => r.name);
}

/**
 * What adding a column of a domain costs: a domain with constraints (its own or its base
 * domains') makes PostgreSQL check every row, a volatile default (unless the column sets its own)
 * fills every row — both rewrite the table under ACCESS EXCLUSIVE.
 */
async function domainRefusal(db: ClientBase, typeName: Node, column: string, ownDefault: boolean): Promise<string | undefined> {
  const names: string[] = (typeName.names ?? []).map((n: Node) => n.String?.sval);
  const { rows } = await db.query<{ domain: string; checks: boolean; default: string | null }>(
    `WITH RECURSIVE d AS (
       SELECT t.oid, t.typbasetype, t.typdefault, 0 AS depth FROM pg_catalog.pg_type t WHERE t.oid = to_regtype($1) AND t.typtype = 'd'
       UNION ALL SELECT b.oid, b.typbasetype, b.typdefault, d.depth + 1 FROM pg_catalog.pg_type b JOIN d ON b.oid = d.typbasetype WHERE b.typtype = 'd')
     SELECT to_regtype($1)::text AS domain,
            EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c WHERE c.contypid IN (SELECT oid FROM d)) AS checks,
            (SELECT typdefault FROM d WHERE typdefault IS NOT NULL ORDER BY depth LIMIT 1) AS default
      WHERE EXISTS (SELECT 1 FROM d)`,
    [names.map(quoteIdent).join('.')],
  );
  const d = rows[0];
  if (!d) return undefined;
  if (d.checks) {
    return `ADD COLUMN ${column} of domain ${d.domain}, which has a CHECK: PostgreSQL checks it against every row, rewriting the table under ACCESS EXCLUSIVE: add a column of its base type, backfill it, then change its type to the domain in a rewrite step`;
  }
  if (d.default !== null && !ownDefault) {
    const stmts = await parseStatements(`SELECT (${d.default})`);
    const volatile = typeof stmts === 'string' ? [] : await volatileFunctions(db, [...functionNames(stmts)]);
    if (volatile.length) {
      return `ADD COLUMN ${column} of domain ${d.domain}, whose default is volatile (${volatile.join(', ')}): it fills every row, rewriting the table under ACCESS EXCLUSIVE: add the column with DEFAULT NULL, backfill it in a backfill step, then DROP DEFAULT … SET DEFAULT as wanted`;
    }
  }
  return undefined;
}

type AlterJudge = (db: ClientBase, table: QualifiedName, cmd: Node, context: JudgeContext) => Promise<string | undefined>;

/** ADD COLUMN: what fills or checks every row, or builds an index, under ACCESS EXCLUSIVE. */
async function judgeAddColumn(db: ClientBase, _table: QualifiedName, cmd: Node): Promise<string | undefined> {
  const def = cmd.def.ColumnDef;
  const type = typeNameText(def.typeName).name;
  if (SERIAL_TYPES.has(type)) {
    return `ADD COLUMN ${def.colname} ${type} fills every row from a sequence, rewriting the table under ACCESS EXCLUSIVE: add a plain column, backfill it from the sequence, then SET DEFAULT`;
  }
  for (const c of (def.constraints ?? []).map((x: Node) => x.Constraint)) {
    if (c.contype === 'CONSTR_IDENTITY' || c.contype === 'CONSTR_GENERATED') {
      return `ADD COLUMN ${def.colname} ${c.contype === 'CONSTR_IDENTITY' ? 'GENERATED AS IDENTITY' : 'GENERATED … STORED'} rewrites the table under ACCESS EXCLUSIVE: add a plain column and a backfill step instead`;
    }
    if (c.contype === 'CONSTR_PRIMARY' || c.contype === 'CONSTR_UNIQUE') {
      return `ADD COLUMN ${def.colname} with ${c.contype === 'CONSTR_PRIMARY' ? 'PRIMARY KEY' : 'UNIQUE'} builds an index under ACCESS EXCLUSIVE: add the column, build a unique index step, then ADD CONSTRAINT … USING INDEX`;
    }
    if (c.contype === 'CONSTR_CHECK' || c.contype === 'CONSTR_FOREIGN') {
      return `ADD COLUMN ${def.colname} with an inline ${c.contype === 'CONSTR_CHECK' ? 'CHECK' : 'REFERENCES'} scans the table under ACCESS EXCLUSIVE: add the column, then ADD CONSTRAINT … NOT VALID in a sql step and a validate step`;
    }
    if (c.contype === 'CONSTR_DEFAULT') {
      const volatile = await volatileFunctions(db, [...functionNames(c.raw_expr)]);
      if (volatile.length) {
        return (
          `ADD COLUMN ${def.colname} with a volatile default (${volatile.join(', ')}) rewrites the table under ACCESS EXCLUSIVE: ` +
          'add the column without a default (or with a constant one), backfill it in a backfill step, then SET DEFAULT in a sql step'
        );
      }
    }
  }
  const ownDefault = (def.constraints ?? []).some((x: Node) => x.Constraint?.contype === 'CONSTR_DEFAULT');
  return domainRefusal(db, def.typeName, def.colname, ownDefault);
}

/** ADD CONSTRAINT: a validating scan or an index build under the table's lock. */
async function judgeAddConstraint(db: ClientBase, table: QualifiedName, cmd: Node, context: JudgeContext): Promise<string | undefined> {
  const c = cmd.def.Constraint;
  if ((c.contype === 'CONSTR_FOREIGN' || c.contype === 'CONSTR_CHECK') && !c.skip_validation) {
    const what = c.contype === 'CONSTR_FOREIGN' ? 'FOREIGN KEY' : 'CHECK';
    return (
      `ADD CONSTRAINT ${c.conname ?? ''} ${what} without NOT VALID scans the table while holding its lock: ` +
      `add it NOT VALID in this step, then VALIDATE it in a validate step (validate: { table, constraint })`
    );
  }
  if ((c.contype === 'CONSTR_PRIMARY' || c.contype === 'CONSTR_UNIQUE') && !c.indexname) {
    return (
      `ADD ${c.contype === 'CONSTR_PRIMARY' ? 'PRIMARY KEY' : 'UNIQUE'} builds its index under ACCESS EXCLUSIVE: build it with an index step (unique: true), ` +
      'then ADD CONSTRAINT … USING INDEX in a sql step'
    );
  }
  if (c.contype === 'CONSTR_EXCLUSION') return 'ADD EXCLUDE builds its index under ACCESS EXCLUSIVE; no step runs it';
  if (c.contype !== 'CONSTR_PRIMARY' || !c.indexname) return undefined;
  // PRIMARY KEY sets its columns NOT NULL: a scan under ACCESS EXCLUSIVE for each that is not.
  const { rows } = await db.query<{ name: string; not_null: boolean }>(
    `SELECT a.attname::text AS name, a.attnotnull AS not_null FROM pg_catalog.pg_index i
       JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
      WHERE i.indexrelid = to_regclass($1) ORDER BY a.attnum`,
    [quoteQualified({ schema: table.schema, name: String(c.indexname) })],
  );
  const nullable = rows.filter((r) => !r.not_null && !context.notNullEarlier?.(table, r.name)).map((r) => r.name);
  if (nullable.length === 0) return undefined;
  return (
    `ADD PRIMARY KEY USING INDEX ${c.indexname}: ${nullable.join(', ')} ${nullable.length > 1 ? 'are' : 'is'} nullable, and the primary key sets NOT NULL with a scan under ACCESS EXCLUSIVE: ` +
    'SET NOT NULL first, in a step of its own (Ferry runs it in its safe form)'
  );
}

/** ALTER COLUMN … TYPE: a rewrite of the table or a rebuild of its indexes. */
async function judgeColumnType(db: ClientBase, table: QualifiedName, cmd: Node): Promise<string | undefined> {
  const def = cmd.def.ColumnDef;
  const collation = await collationChange(db, table, cmd.name, def.collClause);
  if (collation) {
    return `ALTER COLUMN ${cmd.name} TYPE … COLLATE ${collation} changes the column's collation: PostgreSQL rebuilds its indexes under ACCESS EXCLUSIVE: use a rewrite step`;
  }
  if (def.raw_default) {
    return `ALTER COLUMN ${cmd.name} TYPE … USING rewrites the table under ACCESS EXCLUSIVE: use a rewrite step (a copy of the table in the new shape, kept in step, then swapped), or add a new column, backfill it and switch to it`;
  }
  const rewrite = await typeChangeRewrites(db, table, cmd.name, def.typeName);
  if (!rewrite) return undefined;
  return (
    `ALTER COLUMN ${cmd.name} TYPE ${rewrite} rewrites the table under ACCESS EXCLUSIVE: use a rewrite step (a copy of the table in the new shape, ` +
    'kept in step, then swapped), or add a new column of the new type, backfill it and switch to it'
  );
}

/** A subcommand that always rewrites the table. */
const judgeRewrite: AlterJudge = async (_db, _table, cmd) => `${String(cmd.subtype).replace('AT_', '')} rewrites the table under ACCESS EXCLUSIVE; no step runs it`;

/** The ALTER TABLE subcommands that can hold the table's lock for a scan or a rewrite; the rest take it briefly. */
const ALTER_JUDGES: Record<string, AlterJudge> = {
  AT_AddColumn: judgeAddColumn,
  AT_AddConstraint: judgeAddConstraint,
  AT_AlterColumnType: judgeColumnType,
  AT_SetTableSpace: judgeRewrite,
  AT_SetLogged: judgeRewrite,
  AT_SetUnLogged: judgeRewrite,
};

async function judgeAlterCommand(db: ClientBase, table: QualifiedName, cmd: Node, context: JudgeContext): Promise<Verdict | undefined> {
  const judge = Object.prototype.hasOwnProperty.call(ALTER_JUDGES, cmd.subtype) ? ALTER_JUDGES[cmd.subtype] : undefined;
  const message = judge ? await judge(db, table, cmd, context) : undefined;
  return message === undefined ? undefined : { action: 'refuse', message };
}

/** The collation a COLLATE clause names, when it is not the column's own; undefined otherwise. */
async function collationChange(db: ClientBase, table: QualifiedName, column: string, clause: Node | undefined): Promise<string | undefined> {
  const names: string[] = (clause?.collname ?? []).map((n: Node) => n.String?.sval);
  if (names.length === 0) return undefined;
  const wanted = names.map(quoteIdent).join('.');
  const { rows } = await db.query<{ same: boolean | null }>(
    `SELECT a.attcollation = (SELECT c.oid FROM pg_catalog.pg_collation c
                               WHERE c.collname = $4 AND ($3::text IS NULL OR c.collnamespace = to_regnamespace($3))
                               ORDER BY c.collnamespace = 'pg_catalog'::regnamespace DESC LIMIT 1) AS same
       FROM pg_catalog.pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`,
    [quoteQualified(table), column, names.length > 1 ? names[0] : null, names[names.length - 1]],
  );
  return rows[0]?.same === true ? undefined : wanted;
}

async function volatileFunctions(db: ClientBase, names: string[]): Promise<string[]> {
  if (names.length === 0) return [];
  const { rows } = await db.query<{ name: string }>(
    `SELECT DISTINCT proname::text AS name FROM pg_catalog.pg_proc WHERE proname = ANY ($1::text[]) AND provolatile = 'v' ORDER BY 1`,
    [names],
  );
  return rows.map((r) => r.name);
}

/**
 * The new type's name when changing the column to it rewrites the table; undefined when it does
 * not: varchar(n) to a longer varchar, varchar or text; text to unbounded varchar; numeric(p,s)
 * to numeric with the same scale and no smaller precision, or unconstrained. Everything else is
 * taken to rewrite (PostgreSQL may skip it in a few more cases; Ferry errs on the safe side).
 */
async function typeChangeRewrites(db: ClientBase, table: QualifiedName, column: string, typeName: Node): Promise<string | undefined> {
  const wanted = typeNameText(typeName);
  const display = `${SQL_TYPE_NAMES[wanted.name] ?? wanted.name}${wanted.typmods.length ? `(${wanted.typmods.join(',')})` : ''}`;
  const { rows } = await db.query<{ type: string; typmod: number }>(
    `SELECT t.typname::text AS type, a.atttypmod AS typmod
       FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
      WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`,
    [quoteQualified(table), column],
  );
  if (rows.length === 0) return display; // an unknown column: not ours to wave through
  const from = rows[0];
  const to = wanted.name.replace(/^character varying$/, 'varchar');
  const toLen = wanted.typmods[0];
  const fromLen = from.typmod > 4 ? from.typmod - 4 : undefined; // varchar's typmod is length + 4
  if (from.type === 'varchar') {
    if (to === 'text') return undefined;
    if (to === 'varchar' && (toLen === undefined || (fromLen !== undefined && toLen >= fromLen))) return undefined;
  }
  if (from.type === 'text' && to === 'varchar' && toLen === undefined) return undefined;
  if (from.type === 'numeric' && to === 'numeric') {
    if (wanted.typmods.length === 0) return undefined;
    if (from.typmod > 0) {
      const precision = ((from.typmod - 4) >> 16) & 0xffff;
      const scale = (from.typmod - 4) & 0xffff;
      if (wanted.typmods[0] >= precision && (wanted.typmods[1] ?? 0) === scale) return undefined;
    }
  }
  return display;
}

/**
 * A plan's SQL expression (a backfill's `set` value or `where`, a partial index's condition):
 * it must parse as exactly one expression, so no second statement can ride along. Ferry embeds
 * it in parentheses, so it must parse that way and on its own too: a text that closes its own
 * parentheses (`a) OR (b`) parses only when wrapped, and would break out of them where it is
 * embedded after another condition; one that ends in a `--` comment parses only unwrapped. A text
 * that parses both ways is, wrapped, exactly the one expression the parser saw.
 */
export async function expressionRefusal(text: string, kind: 'value' | 'condition'): Promise<string | undefined> {
  const what = kind === 'value' ? 'expression' : 'condition';
  const wrapped = kind === 'value' ? `SELECT (${text})` : `SELECT 1 WHERE (${text})`;
  const stmts = await parseStatements(wrapped);
  const alone = await parseStatements(kind === 'value' ? `SELECT ${text}` : `SELECT 1 WHERE ${text}`);
  if (typeof stmts === 'string' && typeof alone !== 'string') {
    return `must parse on its own as one SQL ${what}, as it does not in parentheses: ${stmts.replace(/^does not parse as PostgreSQL: /, '')} (a comment must be closed within it)`;
  }
  if (typeof stmts !== 'string' && typeof alone === 'string') {
    return `must parse on its own as one SQL ${what}: ${alone.replace(/^does not parse as PostgreSQL: /, '')} (its parentheses must close within it)`;
  }
  if (typeof stmts === 'string') return `is not one SQL ${what}: ${stmts.replace(/^does not parse as PostgreSQL: /, '')}`;
  const select = stmts.length === 1 ? stmts[0].SelectStmt : undefined;
  const shape = select && (kind === 'value' ? select.targetList?.length === 1 && !select.fromClause && !select.whereClause : select.targetList?.length === 1 && !select.fromClause);
  if (!shape || select.op !== 'SETOP_NONE' || select.limitCount || select.sortClause || select.groupClause || select.havingClause) {
    return `must be one SQL ${kind === 'value' ? 'expression' : 'condition'} (no second statement, no clauses around it)`;
  }
  return undefined;
}

/**
 * A backfill's expressions judged (its `set` values, its `where`): each problem with the field it
 * is in (`set.<column>`, `where`), for preflight and for the slice that runs them alike.
 */
export async function backfillExpressionProblems(backfill: { set: { column: string; expression: string }[]; where?: string }): Promise<string[]> {
  const problems: string[] = [];
  for (const { column, expression } of backfill.set) {
    const bad = await expressionRefusal(expression, 'value');
    if (bad) problems.push(`set.${column}: ${bad}`);
  }
  const bad = backfill.where === undefined ? undefined : await expressionRefusal(backfill.where, 'condition');
  if (bad) problems.push(`where: ${bad}`);
  return problems;
}

/** Tables a statement creates and columns and constraints it adds: what later steps may name before it exists. */
export function declaredBy(stmt: Node): { tables: QualifiedName[]; columns: { table: QualifiedName; column: string }[]; constraints: { table: QualifiedName; name: string }[]; indexes: string[] } {
  const out = { tables: [] as QualifiedName[], columns: [] as { table: QualifiedName; column: string }[], constraints: [] as { table: QualifiedName; name: string }[], indexes: [] as string[] };
  if (stmt.CreateStmt) {
    const table = tableOf(stmt.CreateStmt.relation);
    out.tables.push(table);
    for (const elt of stmt.CreateStmt.tableElts ?? []) if (elt.ColumnDef) out.columns.push({ table, column: elt.ColumnDef.colname });
  }
  if (stmt.AlterTableStmt) {
    const table = tableOf(stmt.AlterTableStmt.relation);
    for (const c of (stmt.AlterTableStmt.cmds ?? []).map((x: Node) => x.AlterTableCmd)) {
      if (c.subtype === 'AT_AddColumn') out.columns.push({ table, column: c.def.ColumnDef.colname });
      if (c.subtype === 'AT_AddConstraint' && c.def.Constraint.conname) out.constraints.push({ table, name: c.def.Constraint.conname });
    }
  }
  return out;
}
