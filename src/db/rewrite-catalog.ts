/**
 * What a rewrite reads from the catalog about the table it rebuilds, and the shadow it builds:
 * `inspectOriginal` lists what the shadow and the swap carry and what they cannot (each refusal
 * names the object); `buildShadow` creates the shadow with the new shape inside the caller's
 * transaction — preflight runs it and rolls back, the step runs it and commits. Ferry's sessions
 * have an empty search_path, so every definition read here comes back schema-qualified.
 */
import { ClientBase, QueryResultRow } from 'pg';
import { parseStatements } from '../change/statements';
import { ColumnMapping, RewriteKey, RewriteNames } from '../change/rewrite-sql';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import { KeyColumn } from '../core/plan';

export interface OriginalTable {
  relid: number;
  key: KeyColumn[];
  columns: Set<string>;
  /** CREATE/ALTER statements after the LIKE, in order, with a label for error messages. */
  indexes: { oid: number; name: string; constraint?: string; definition: string; unique: boolean; head: string[]; tablespace: string | null }[];
  outgoingForeignKeys: { name: string; definition: string }[];
  owner: string;
  grants: { grantee: string; privilege: string; grantable: boolean }[];
  comment: string | null;
  reloptions: string[];
  /** UNLOGGED, and a tablespace other than the database's default: the shadow is made the same. */
  unlogged: boolean;
  tablespace: string | null;
}

/** Everything that stops a rewrite of the table, each naming its object; empty when it can run. */
export async function inspectOriginal(db: ClientBase, table: QualifiedName, ownTriggers: string[]): Promise<{ problems: string[]; original?: OriginalTable }> {
  const name = displayQualified(table);
  const rel = await readRelation(db, table);
  if (!rel) return { problems: [`${name} does not exist`] };
  if (rel.relkind === 'p') return { problems: [`${name} is partitioned: a rewrite of a partitioned table is not supported (rewrite its partitions' shape with a migration instead)`] };
  if (rel.relkind !== 'r') return { problems: [`${name} is not an ordinary table`] };
  const list: RowsOf = async (sql, params = [rel.relid]) => (await db.query(sql, params)).rows;
  const problems = [...(await ownObjectProblems(list, rel, name, ownTriggers)), ...(await dependentProblems(db, list, rel.relid, name))];
  const key = await readKey(list);
  if (!key.length) problems.push(`${name} has no primary key: a rewrite copies and syncs by key`);
  const carried = await readCarried(list);
  return {
    problems,
    original: {
      relid: rel.relid,
      key,
      columns: carried.columns,
      indexes: carried.indexes,
      outgoingForeignKeys: carried.outgoingForeignKeys,
      owner: rel.owner,
      grants: carried.grants,
      comment: rel.comment,
      reloptions: rel.reloptions,
      unlogged: rel.persistence === 'u',
      tablespace: rel.tablespace,
    },
  };
}

/** The rows of a catalog query about the table (its oid is the default parameter). */
type RowsOf = (sql: string, params?: unknown[]) => Promise<QueryResultRow[]>;

interface Relation {
  relid: number;
  relkind: string;
  relrowsecurity: boolean;
  relreplident: string;
  owner: string;
  comment: string | null;
  reloptions: string[];
  persistence: string;
  tablespace: string | null;
}

async function readRelation(db: ClientBase, table: QualifiedName): Promise<Relation | null> {
  const rel = await db.query(
    `SELECT c.oid::int8 AS relid, c.relkind, c.relrowsecurity, c.relreplident, pg_catalog.pg_get_userbyid(c.relowner) AS owner,
            pg_catalog.obj_description(c.oid, 'pg_class') AS comment, coalesce(c.reloptions, '{}') AS reloptions,
            c.relpersistence::text AS persistence, (SELECT t.spcname::text FROM pg_catalog.pg_tablespace t WHERE t.oid = c.reltablespace) AS tablespace
       FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($1)`,
    [quoteQualified(table)],
  );
  if (!rel.rowCount) return null;
  return { ...rel.rows[0], relid: Number(rel.rows[0].relid) };
}

/** What the table itself has that a rewrite does not carry: inheritance, triggers, rules, policies, publications, replica identity, column grants. */
async function ownObjectProblems(list: RowsOf, rel: Relation, name: string, ownTriggers: string[]): Promise<string[]> {
  const problems: string[] = [];
  for (const i of await list(
    `SELECT inhparent::regclass::text AS parent, inhrelid::regclass::text AS child FROM pg_catalog.pg_inherits WHERE inhrelid = $1 OR inhparent = $1`,
  )) {
    problems.push(`${name} takes part in inheritance (${i.child} inherits from ${i.parent}): not carried by a rewrite`);
  }
  for (const t of await list(`SELECT tgname FROM pg_catalog.pg_trigger WHERE tgrelid = $1 AND NOT tgisinternal AND NOT (tgname = ANY ($2))`, [rel.relid, ownTriggers])) {
    problems.push(`trigger ${t.tgname} on ${name}: triggers are not carried to the new table in this version; drop it first and recreate it after the swap`);
  }
  for (const rule of await list(`SELECT rulename FROM pg_catalog.pg_rewrite WHERE ev_class = $1 AND rulename <> '_RETURN'`)) {
    problems.push(`rule ${rule.rulename} on ${name}: rules are not carried by a rewrite`);
  }
  if (rel.relrowsecurity) problems.push(`${name} has row level security enabled: policies are not carried in this version`);
  for (const p of await list(`SELECT polname FROM pg_catalog.pg_policy WHERE polrelid = $1`)) {
    problems.push(`policy ${p.polname} on ${name}: row level security policies are not carried in this version`);
  }
  for (const p of await list(`SELECT p.pubname FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid WHERE r.prrelid = $1`)) {
    problems.push(`publication ${p.pubname} lists ${name}: publication membership is not carried in this version`);
  }
  if (rel.relreplident !== 'd') problems.push(`${name} has a non-default REPLICA IDENTITY: not carried in this version`);
  for (const a of await list(`SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attacl IS NOT NULL`)) {
    problems.push(`column privileges on ${name}.${a.attname}: not carried in this version`);
  }
  return problems;
}

/** What depends on the table and would not follow it: views beyond the simple ones, SQL-standard functions, self-references. */
async function dependentProblems(db: ClientBase, list: RowsOf, relid: number, name: string): Promise<string[]> {
  const problems: string[] = [];
  for (const d of await dependentViews(db, relid)) {
    if (d.relkind !== 'v') problems.push(`materialized view ${d.name} depends on ${name}: not carried by a rewrite; drop it first`);
    else if (d.dependents.length) problems.push(`view ${d.name} depends on ${name} and has dependents of its own (${d.dependents.join(', ')}): only views directly on the table are carried`);
    else if (d.extras.length) problems.push(`view ${d.name} depends on ${name} and has ${d.extras.join(', ')}: not carried`);
  }
  for (const f of await list(
    `SELECT DISTINCT p.oid::regprocedure::text AS fn FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_proc p ON p.oid = d.objid
      WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = $1`,
  )) {
    problems.push(`function ${f.fn} depends on ${name} (a SQL-standard body): not carried by a rewrite`);
  }
  for (const f of await list(`SELECT conname FROM pg_catalog.pg_constraint WHERE contype = 'f' AND conrelid = $1 AND confrelid = $1`)) {
    problems.push(`foreign key ${f.conname} of ${name} references the table itself: not carried in this version`);
  }
  return problems;
}

/** The primary key's columns in key order; empty when the table has none. */
async function readKey(list: RowsOf): Promise<KeyColumn[]> {
  const keyRows = await list(
    `SELECT a.attname AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type, a.attcollation <> 0 AS collatable
       FROM pg_catalog.pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
       JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
      WHERE c.conrelid = $1 AND c.contype = 'p' ORDER BY k.n`,
  );
  return keyRows.map((k) => ({ name: k.name, type: k.type, collatable: k.collatable }));
}

/** What the shadow and the swap carry over: columns, indexes and key constraints, outgoing foreign keys, grants. */
async function readCarried(list: RowsOf): Promise<Pick<OriginalTable, 'columns' | 'indexes' | 'outgoingForeignKeys' | 'grants'>> {
  const columns = new Set((await list(`SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`)).map((a) => a.attname as string));
  const indexes = (
    await list(
      `SELECT i.indexrelid::int8 AS oid, ic.relname AS name, i.indisunique AS unique, con.conname AS constraint,
              -- How pg_get_indexdef begins, in its own quoting (quote_ident, regclass text).
              ARRAY['CREATE UNIQUE INDEX ' || pg_catalog.quote_ident(ic.relname) || ' ON ' || i.indrelid::regclass::text || ' ',
                    'CREATE INDEX ' || pg_catalog.quote_ident(ic.relname) || ' ON ' || i.indrelid::regclass::text || ' '] AS head,
              CASE WHEN con.oid IS NULL THEN pg_catalog.pg_get_indexdef(i.indexrelid) ELSE pg_catalog.pg_get_constraintdef(con.oid) END AS definition,
              -- pg_get_indexdef leaves the tablespace out.
              (SELECT t.spcname::text FROM pg_catalog.pg_tablespace t WHERE t.oid = ic.reltablespace) AS tablespace
         FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
         LEFT JOIN pg_catalog.pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u', 'x')
        WHERE i.indrelid = $1 ORDER BY i.indisprimary DESC, ic.relname`,
    )
  ).map((i) => ({
    oid: Number(i.oid),
    name: i.name as string,
    unique: i.unique as boolean,
    constraint: (i.constraint as string | null) ?? undefined,
    definition: i.definition as string,
    head: i.head as string[],
    tablespace: (i.tablespace as string | null) ?? null,
  }));
  const outgoingForeignKeys = (
    await list(`SELECT conname AS name, pg_catalog.pg_get_constraintdef(oid) AS definition FROM pg_catalog.pg_constraint WHERE contype = 'f' AND conrelid = $1 AND confrelid <> $1 ORDER BY conname`)
  ).map((f) => ({ name: f.name as string, definition: (f.definition as string).replace(/ NOT VALID$/, '') }));
  const grants = (
    await list(
      `SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END AS grantee, a.privilege_type AS privilege, a.is_grantable AS grantable
         FROM pg_catalog.pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a WHERE c.oid = $1 AND a.grantee <> c.relowner`,
    )
  ).map((g) => ({ grantee: g.grantee as string, privilege: g.privilege as string, grantable: g.grantable as boolean }));
  return { columns, indexes, outgoingForeignKeys, grants };
}

export interface DependentView {
  oid: number;
  name: string;
  relkind: string;
  /** Views and other relations that depend on this view in turn. */
  dependents: string[];
  /** Triggers and rules of its own, which a recreated view would lose. */
  extras: string[];
  /** Columns of the table the view reads. */
  columns: string[];
}

/** Views (and materialized views) whose rules read the table. */
export async function dependentViews(db: ClientBase, relid: number): Promise<DependentView[]> {
  const { rows } = await db.query(
    `SELECT v.oid::int8 AS oid, v.oid::regclass::text AS name, v.relkind,
            array(SELECT DISTINCT dv.oid::regclass::text FROM pg_catalog.pg_depend dd JOIN pg_catalog.pg_rewrite dr ON dr.oid = dd.objid
                    JOIN pg_catalog.pg_class dv ON dv.oid = dr.ev_class
                   WHERE dd.classid = 'pg_catalog.pg_rewrite'::regclass AND dd.refobjid = v.oid AND dv.oid <> v.oid) AS dependents,
            array(SELECT 'trigger ' || tgname FROM pg_catalog.pg_trigger WHERE tgrelid = v.oid
                  UNION ALL SELECT 'rule ' || rulename FROM pg_catalog.pg_rewrite WHERE ev_class = v.oid AND rulename <> '_RETURN') AS extras,
            array(SELECT DISTINCT a.attname::text FROM pg_catalog.pg_depend cd JOIN pg_catalog.pg_rewrite cr ON cr.oid = cd.objid
                    JOIN pg_catalog.pg_attribute a ON a.attrelid = cd.refobjid AND a.attnum = cd.refobjsubid
                   WHERE cd.classid = 'pg_catalog.pg_rewrite'::regclass AND cr.ev_class = v.oid AND cd.refobjid = $1 AND cd.refobjsubid > 0) AS columns
       FROM pg_catalog.pg_class v
      WHERE v.oid IN (SELECT r.ev_class FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
                       WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = $1 AND r.ev_class <> $1)
      ORDER BY v.oid`,
    [relid],
  );
  return rows.map((r) => ({ oid: Number(r.oid), name: r.name, relkind: r.relkind, dependents: r.dependents, extras: r.extras, columns: r.columns }));
}

/**
 * One ALTER TABLE clause, checked with PostgreSQL's parser: exactly one ALTER TABLE statement
 * with its subcommands, nothing else (no second statement, no RENAME or SET SCHEMA).
 */
export async function alterClauseRefusal(clause: string): Promise<string | undefined> {
  const stmts = await parseStatements(`ALTER TABLE ferry_shadow ${clause}`);
  if (typeof stmts === 'string') return `is not an ALTER TABLE clause: ${stmts.replace(/^does not parse as PostgreSQL: /, '')}`;
  const alter = stmts.length === 1 ? stmts[0].AlterTableStmt : undefined;
  if (!alter || alter.relation?.relname !== 'ferry_shadow' || alter.relation?.schemaname) return 'must be the clauses of one ALTER TABLE statement (without "ALTER TABLE name"), and nothing else';
  return undefined;
}

/** An index definition without its `CREATE [UNIQUE] INDEX name ON table ` (from `USING` on). */
const stripIndexHead = (definition: string, heads: string[]): string | undefined => {
  for (const head of heads) if (definition.startsWith(head)) return definition.slice(head.length);
  return undefined;
};

/**
 * Creates the shadow in the caller's transaction, UNLOGGED and in a tablespace as the table is
 * (its indexes in theirs): LIKE … INCLUDING ALL (columns, defaults,
 * identity, generated columns, CHECK and NOT NULL, comments, statistics, storage) without the
 * indexes, which are built under names that carry the original index's oid so the swap can give
 * each its name back; then the plan's alters, the outgoing foreign keys (NOT VALID; validated
 * after the copy), owner, grants and comment. Returns the column mapping and key of the copy.
 */
export async function buildShadow(
  db: ClientBase,
  table: QualifiedName,
  names: RewriteNames,
  original: OriginalTable,
  alter: string[],
  expressions: { column: string; expression: string }[],
): Promise<{ problems: string[]; mapping: ColumnMapping[]; key: RewriteKey }> {
  const shadow = quoteQualified(names.shadow);
  const created = await createShadow(db, table, shadow, names, original, alter);
  const given = new Map(expressions.map((e) => [e.column, e.expression]));
  const columns = await mapColumns(db, shadow, original, expressions, given);
  const key = await shadowKey(db, shadow, original, given);
  return { problems: [...created, ...columns.problems, ...key.problems], mapping: columns.mapping, key: key.key };
}

/** The shadow table with everything carried and the alters applied; a step that fails is rolled back to its savepoint and reported. */
async function createShadow(db: ClientBase, table: QualifiedName, shadow: string, names: RewriteNames, original: OriginalTable, alter: string[]): Promise<string[]> {
  const problems: string[] = [];
  const run = async (label: string, sql: string): Promise<boolean> => {
    await db.query('SAVEPOINT ferry_shadow_step');
    try {
      await db.query(sql);
      await db.query('RELEASE SAVEPOINT ferry_shadow_step');
      return true;
    } catch (err) {
      await db.query('ROLLBACK TO SAVEPOINT ferry_shadow_step');
      problems.push(`${label.startsWith('.') ? '' : ': '}${label}: ${(err as Error).message}`);
      return false;
    }
  };
  const tablespace = (name: string | null) => (name ? ` TABLESPACE ${quoteIdent(name)}` : '');
  await db.query(`CREATE ${original.unlogged ? 'UNLOGGED ' : ''}TABLE ${shadow} (LIKE ${quoteQualified(table)} INCLUDING ALL EXCLUDING INDEXES)${tablespace(original.tablespace)}`);
  if (original.reloptions.length) await run('storage parameters', `ALTER TABLE ${shadow} SET (${original.reloptions.join(', ')})`);
  for (const index of original.indexes) {
    const newName = quoteIdent(`${names.indexPrefix}${index.oid}`);
    let built = false;
    if (index.constraint) {
      built = await run(`constraint ${index.constraint}`, `ALTER TABLE ${shadow} ADD CONSTRAINT ${newName} ${index.definition}`);
    } else {
      const rest = stripIndexHead(index.definition, index.head);
      if (rest === undefined) problems.push(`: index ${index.name}: its definition could not be carried (${index.definition})`);
      else built = await run(`index ${index.name}`, `CREATE ${index.unique ? 'UNIQUE ' : ''}INDEX ${newName} ON ${shadow} ${rest}`);
    }
    // Moved while the shadow is empty: nothing to copy.
    if (built && index.tablespace) await run(`index ${index.name}`, `ALTER INDEX ${quoteQualified({ schema: names.shadow.schema, name: `${names.indexPrefix}${index.oid}` })} SET${tablespace(index.tablespace)}`);
  }
  for (const [i, clause] of alter.entries()) await run(`.alter[${i}]`, `ALTER TABLE ${shadow} ${clause}`);
  for (const fk of original.outgoingForeignKeys) await run(`foreign key ${fk.name}`, `ALTER TABLE ${shadow} ADD CONSTRAINT ${quoteIdent(fk.name)} ${fk.definition} NOT VALID`);
  await db.query(`ALTER TABLE ${shadow} OWNER TO ${quoteIdent(original.owner)}`);
  for (const g of original.grants) await db.query(`GRANT ${g.privilege} ON ${shadow} TO ${g.grantee}${g.grantable ? ' WITH GRANT OPTION' : ''}`);
  if (original.comment !== null) await db.query(`COMMENT ON TABLE ${shadow} IS ${db.escapeLiteral(original.comment)}`);
  return problems;
}

/** Which shadow column is filled from what: a given expression, else the original column of that name; generated columns from nothing. */
async function mapColumns(
  db: ClientBase,
  shadow: string,
  original: OriginalTable,
  expressions: { column: string; expression: string }[],
  given: Map<string, string>,
): Promise<{ problems: string[]; mapping: ColumnMapping[] }> {
  const { rows } = await db.query(
    `SELECT attname, pg_catalog.format_type(atttypid, atttypmod) AS type, attgenerated <> '' AS generated
       FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    [shadow],
  );
  const problems: string[] = [];
  const mapping: ColumnMapping[] = [];
  for (const c of rows) {
    const expression = given.get(c.attname) ?? (original.columns.has(c.attname) ? quoteIdent(c.attname) : undefined);
    if (given.has(c.attname) && c.generated) problems.push(`.columns.${c.attname}: is a generated column of the new table; it cannot be given an expression`);
    if (expression !== undefined && !c.generated) mapping.push({ column: c.attname, type: c.type, expression });
  }
  for (const e of expressions) if (!rows.some((c) => c.attname === e.column)) problems.push(`.columns.${e.column}: the new table has no such column`);
  return { problems, mapping };
}

/** The shadow's primary key must be the original's, by column name; its types may change. */
async function shadowKey(db: ClientBase, shadow: string, original: OriginalTable, given: Map<string, string>): Promise<{ problems: string[]; key: RewriteKey }> {
  const found = await db.query(
    `SELECT a.attname AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type
       FROM pg_catalog.pg_constraint c CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
       JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
      WHERE c.conrelid = $1::regclass AND c.contype = 'p' ORDER BY k.n`,
    [shadow],
  );
  const problems: string[] = [];
  const sameKey = found.rows.length === original.key.length && found.rows.every((k, i) => k.name === original.key[i].name);
  if (!sameKey) problems.push(`: the alters change or drop the primary key (${original.key.map((k) => k.name).join(', ')}): a new primary key is not carried in this version`);
  // The sync finds a key's rows in both tables by its value: key columns are copied as they are
  // (their type may change), never through an expression.
  for (const k of original.key) if (given.has(k.name)) problems.push(`.columns.${k.name}: a primary key column is copied as it is (the alters may change its type), not through an expression`);
  return { problems, key: { columns: original.key, shadowTypes: found.rows.map((k) => k.type) } };
}
