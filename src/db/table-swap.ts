/**
 * Moving a table's name and what refers to it onto a replacement table, inside the caller's
 * transaction with both tables locked: used by a rewrite's swap (the shadow replaces the
 * original) and by its revert (the old table replaces the new one). Views are read, dropped and
 * recreated from their definitions; foreign keys that reference the table are dropped and added
 * again NOT VALID (validated afterwards, without a lock writers wait for); sequences owned by
 * its columns move to the replacement's columns of the same name; identity sequences go on from
 * the current value and take the current one's name; indexes pair up and swap names.
 */
import { ClientBase } from 'pg';
import { QualifiedName, quoteIdent, quoteQualified, withSuffix } from '../core/identifiers';
import { dependentViews } from './rewrite-catalog';

interface ViewDefinition {
  name: QualifiedName;
  definition: string;
  owner: string;
  options: string[];
  comment: string | null;
  grants: string[];
}

/** What refers to a table by its OID, read before the names move. */
export interface Dependents {
  views: ViewDefinition[];
  foreignKeys: { table: string; name: string; definition: string }[];
  /** Sequences owned by one of the table's columns (serial), with that column. */
  owned: { sequence: string; column: string }[];
}

async function readView(db: ClientBase, oid: number): Promise<ViewDefinition> {
  const { rows } = await db.query(
    `SELECT n.nspname AS schema, c.relname AS name, pg_catalog.pg_get_viewdef(c.oid) AS definition, pg_catalog.pg_get_userbyid(c.relowner) AS owner,
            coalesce(c.reloptions, '{}') AS options, pg_catalog.obj_description(c.oid, 'pg_class') AS comment,
            array(SELECT a.privilege_type || ' TO ' || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
                         || CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END
                    FROM aclexplode(c.relacl) a WHERE a.grantee <> c.relowner) AS grants
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`,
    [oid],
  );
  const r = rows[0];
  return { name: { schema: r.schema, name: r.name }, definition: r.definition, owner: r.owner, options: r.options, comment: r.comment, grants: r.grants };
}

export async function relid(db: ClientBase, table: QualifiedName): Promise<number> {
  return Number((await db.query('SELECT $1::regclass::oid::int8 AS relid', [quoteQualified(table)])).rows[0].relid);
}

export async function readDependents(db: ClientBase, table: number): Promise<Dependents> {
  const views: ViewDefinition[] = [];
  for (const v of await dependentViews(db, table)) views.push(await readView(db, v.oid));
  const foreignKeys = (
    await db.query(
      `SELECT conrelid::regclass::text AS table, conname AS name, pg_catalog.pg_get_constraintdef(oid) AS definition
         FROM pg_catalog.pg_constraint WHERE contype = 'f' AND confrelid = $1 AND conrelid <> $1 ORDER BY 1, 2`,
      [table],
    )
  ).rows;
  const owned = (
    await db.query(
      `SELECT s.oid::regclass::text AS sequence, a.attname AS column
         FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S'
         JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
        WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refobjid = $1 AND d.deptype = 'a'`,
      [table],
    )
  ).rows;
  return { views, foreignKeys, owned };
}

/** Drops the views and the referencing foreign keys (both come back by attachDependents). */
export async function detachDependents(db: ClientBase, d: Dependents): Promise<void> {
  for (const v of d.views) await db.query(`DROP VIEW ${quoteQualified(v.name)}`);
  for (const fk of d.foreignKeys) await db.query(`ALTER TABLE ${fk.table} DROP CONSTRAINT ${quoteIdent(fk.name)}`);
}

/** After the rename: owned sequences, views and foreign keys on whatever now has the name `table`. */
export async function attachDependents(db: ClientBase, d: Dependents, table: QualifiedName): Promise<void> {
  const columns = new Set(
    (await db.query(`SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, [quoteQualified(table)])).rows.map(
      (r) => r.attname as string,
    ),
  );
  for (const o of d.owned) {
    if (columns.has(o.column)) await db.query(`ALTER SEQUENCE ${o.sequence} OWNED BY ${quoteQualified(table)}.${quoteIdent(o.column)}`);
  }
  for (const v of d.views) {
    const options = v.options.length ? ` WITH (${v.options.join(', ')})` : '';
    await db.query(`CREATE VIEW ${quoteQualified(v.name)}${options} AS ${v.definition}`);
    await db.query(`ALTER VIEW ${quoteQualified(v.name)} OWNER TO ${quoteIdent(v.owner)}`);
    for (const g of v.grants) await db.query(`GRANT ${g.replace(/ TO /, ` ON ${quoteQualified(v.name)} TO `)}`);
    if (v.comment !== null) await db.query(`COMMENT ON VIEW ${quoteQualified(v.name)} IS ${db.escapeLiteral(v.comment)}`);
  }
  for (const fk of d.foreignKeys) {
    await db.query(`ALTER TABLE ${fk.table} ADD CONSTRAINT ${quoteIdent(fk.name)} ${fk.definition.replace(/ NOT VALID$/, '')} NOT VALID`);
  }
}

/**
 * The foreign keys of the table that steps aside at a swap (to other tables) are dropped: kept,
 * they would refuse the application's deletes of the rows they reference on behalf of a table
 * nobody writes any more. The table that takes its name gets each of them it has not got, NOT
 * VALID — a rewrite's shadow has them already; an old table coming back in a revert gets them
 * again — and those are returned, to be validated once the swap has committed. Both take a
 * SHARE ROW EXCLUSIVE lock on the referenced table, under the swap's lock_timeout.
 */
export async function moveOutgoingForeignKeys(db: ClientBase, leaving: number, arriving: number, arrivingName: QualifiedName): Promise<{ table: string; name: string }[]> {
  const outgoing = (table: number) =>
    db.query(
      `SELECT conrelid::regclass::text AS table, conname AS name, pg_catalog.pg_get_constraintdef(oid) AS definition
         FROM pg_catalog.pg_constraint WHERE contype = 'f' AND conrelid = $1 AND confrelid <> $1 ORDER BY conname`,
      [table],
    );
  const present = new Set((await outgoing(arriving)).rows.map((f) => f.name as string));
  const added: { table: string; name: string }[] = [];
  for (const fk of (await outgoing(leaving)).rows) {
    await db.query(`ALTER TABLE ${fk.table} DROP CONSTRAINT ${quoteIdent(fk.name)}`);
    if (present.has(fk.name)) continue;
    await db.query(`ALTER TABLE ${quoteQualified(arrivingName)} ADD CONSTRAINT ${quoteIdent(fk.name)} ${(fk.definition as string).replace(/ NOT VALID$/, '')} NOT VALID`);
    added.push({ table: quoteQualified(arrivingName), name: fk.name });
  }
  return added;
}

/**
 * Identity columns: the replacement's sequence goes on from the current one's value and takes
 * its name; the current one's steps aside with `asideSuffix`, as its indexes do.
 *
 * The current sequence is renamed first, which takes its ACCESS EXCLUSIVE lock: a transaction
 * that took a value from it and is still open is waited for (under the swap's lock_timeout), and
 * every nextval after that waits for this transaction, so the value read next is the last one
 * handed out. A nextval queued meanwhile still goes to the sequence that stepped aside (it found
 * it by name before it waited), so that sequence can then give no more: its bound is set to that
 * last value, without CYCLE, and such a nextval fails ("reached maximum value") rather than hand
 * out an id the replacement issues next. The replacement takes the current one's bounds and
 * CYCLE first (on a revert it is the sequence a swap bounded).
 */
export async function carryIdentity(db: ClientBase, replacement: QualifiedName, current: QualifiedName, asideSuffix: string): Promise<void> {
  const identity = await db.query(
    `SELECT pg_catalog.pg_get_serial_sequence($1, a.attname) AS replacement, pg_catalog.pg_get_serial_sequence($2, a.attname) AS current
       FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1::regclass AND a.attidentity <> '' AND NOT a.attisdropped`,
    [quoteQualified(replacement), quoteQualified(current)],
  );
  for (const seq of identity.rows.filter((r) => r.replacement && r.current)) {
    const { rows: named } = await db.query('SELECT c.oid, c.relname, n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::regclass', [seq.current]);
    const { oid, relname: name, nspname: schema } = named[0] as { oid: number; relname: string; nspname: string };
    const aside = quoteQualified({ schema, name: withSuffix(name, asideSuffix) });
    await db.query(`ALTER SEQUENCE ${seq.current} RENAME TO ${quoteIdent(withSuffix(name, asideSuffix))}`);
    const { rows } = await db.query(
      `SELECT d.last_value, d.is_called, s.seqincrement > 0 AS ascending, s.seqmin::text AS min, s.seqmax::text AS max, s.seqstart::text AS start, s.seqcycle AS cycle
         FROM ${aside} d, pg_catalog.pg_sequence s WHERE s.seqrelid = $1`,
      [oid],
    );
    const cur = rows[0] as { last_value: string; is_called: boolean; ascending: boolean; min: string; max: string; start: string; cycle: boolean };
    await db.query(`ALTER SEQUENCE ${seq.replacement} MINVALUE ${cur.min} MAXVALUE ${cur.max} START WITH ${cur.start} ${cur.cycle ? 'CYCLE' : 'NO CYCLE'}`);
    await db.query('SELECT pg_catalog.setval($1::regclass, $2, $3)', [seq.replacement, cur.last_value, cur.is_called]);
    // The sequence aside: its last value counts as handed out, and it hands out no other.
    await db.query('SELECT pg_catalog.setval($1::regclass, $2, true)', [aside, cur.last_value]);
    await db.query(`ALTER SEQUENCE ${aside} NO CYCLE START WITH ${cur.last_value} ${cur.ascending ? 'MAXVALUE' : 'MINVALUE'} ${cur.last_value}`);
    await db.query(`ALTER SEQUENCE ${seq.replacement} RENAME TO ${quoteIdent(name)}`);
  }
}

/** Index pairs in one schema: each current index steps aside with `asideSuffix` and the replacement's takes its name (a constraint follows its index). */
export async function swapIndexNames(db: ClientBase, schema: string, pairs: { current: string; replacement: string }[], asideSuffix: string): Promise<void> {
  const s = quoteIdent(schema);
  for (const p of pairs) {
    await db.query(`ALTER INDEX ${s}.${quoteIdent(p.current)} RENAME TO ${quoteIdent(withSuffix(p.current, asideSuffix))}`);
    await db.query(`ALTER INDEX ${s}.${quoteIdent(p.replacement)} RENAME TO ${quoteIdent(p.current)}`);
  }
}
