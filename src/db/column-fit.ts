/**
 * Whether an existing target column can take every value of its source column.
 *
 * The rule is deliberately conservative. PostgreSQL's catalog says whether a conversion exists
 * (pg_cast and its context, or the I/O conversion to a string type), not whether it can fail for
 * some value: integer → smallint and text → integer both exist and both fail on real data (the
 * copy then stops with 22003 or 22P02, hours in). So a column fits only when
 *
 * - its type and modifier are the source's (`same`);
 * - it is `text` or `varchar` without a length (`text`): every value has a text form, and the
 *   text form is what the text COPY writes and what the checksum compares, so validation holds;
 * - it is the source's type with no modifier or a wider one (`wider`): varchar(n) → varchar(m ≥ n),
 *   numeric(p, s) → numeric(q ≥ p, s), timestamp(p) → timestamp(q ≥ p), any → unconstrained;
 * - or the conversion is one of the integer widenings that the target's pg_cast holds as implicit
 *   (smallint → integer → bigint, any of them → unconstrained numeric) (`wider`): they cannot fail
 *   and print the same digits.
 *
 * Everything else (narrowing, a different scale, char(n) padding, floats, domains, enums by
 * another name, arrays of other types) is refused before anything is written; the operator
 * changes the target column or lets Ferry create the table.
 */
import { ClientBase, escapeLiteral } from 'pg';
import { displayIdent, displayQualified } from '../core/identifiers';
import { FAILURE } from '../core/failure-types';
import { readUserTypes, TableInfo, typeExists } from './catalog';
import { refusal } from './errors';

export interface ColumnType {
  name: string;
  /** format_type(), with the modifier: `numeric(12,2)`. */
  type: string;
  typeOid: number;
  typmod: number;
}

export type Fit = 'same' | 'text' | 'wider' | 'no';

const INT2 = 21;
const INT4 = 23;
const INT8 = 20;
const NUMERIC = 1700;
const TEXT = 25;
const VARCHAR = 1043;
const VARBIT = 1562;
const TIMESTAMP = 1114;
const TIMESTAMPTZ = 1184;
const TIME = 1083;
const TIMETZ = 1266;
/** Built-in types keep their OIDs in every database; user types compare by name. */
const FIRST_USER_OID = 16384;

const INTEGER_WIDENINGS: Record<number, number[]> = { [INT2]: [INT4, INT8, NUMERIC], [INT4]: [INT8, NUMERIC], [INT8]: [NUMERIC] };

/** Whether `target` takes every value of `source`; `implicitCast` is the target catalog's word on source → target. */
export function columnFit(source: ColumnType, target: ColumnType, implicitCast: boolean): Fit {
  const sameType = source.typeOid < FIRST_USER_OID ? source.typeOid === target.typeOid : source.type === target.type;
  if (sameType && (source.typmod === target.typmod || source.type === target.type)) return 'same';
  if ((target.typeOid === TEXT || target.typeOid === VARCHAR) && target.typmod === -1) return 'text';
  if (sameType && source.typeOid < FIRST_USER_OID && widerModifier(source.typeOid, source.typmod, target.typmod)) return 'wider';
  if (implicitCast && INTEGER_WIDENINGS[source.typeOid]?.includes(target.typeOid) && target.typmod === -1) return 'wider';
  return 'no';
}

function widerModifier(type: number, from: number, to: number): boolean {
  if (to === -1) return true;
  if (from === -1) return false;
  switch (type) {
    case VARCHAR:
    case VARBIT:
    case TIMESTAMP:
    case TIMESTAMPTZ:
    case TIME:
    case TIMETZ:
      return to >= from;
    case NUMERIC: {
      // typmod = ((precision << 16) | scale) + 4
      const [p1, s1, p2, s2] = [((from - 4) >> 16) & 0xffff, (from - 4) & 0xffff, ((to - 4) >> 16) & 0xffff, (to - 4) & 0xffff];
      return s1 === s2 && p2 >= p1;
    }
    default:
      return false;
  }
}

const COLUMN_TYPES_SQL = `
SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type,
       a.atttypid::int8 AS type_oid, a.atttypmod AS typmod
  FROM pg_catalog.pg_attribute a
 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`;

export async function readColumnTypes(db: ClientBase, relid: number): Promise<Map<string, ColumnType>> {
  const { rows } = await db.query(COLUMN_TYPES_SQL, [relid]);
  return new Map(rows.map((r) => [r.name, { name: r.name, type: r.type, typeOid: Number(r.type_oid), typmod: r.typmod }]));
}

/** The implicit casts the target's catalog holds between built-in types, as `source>target` pairs. */
export async function readImplicitCasts(db: ClientBase): Promise<Set<string>> {
  const { rows } = await db.query(
    `SELECT castsource::int8 AS s, casttarget::int8 AS t FROM pg_catalog.pg_cast WHERE castcontext = 'i' AND castsource < ${FIRST_USER_OID} AND casttarget < ${FIRST_USER_OID}`,
  );
  return new Set(rows.map((r) => `${r.s}>${r.t}`));
}

/**
 * Refuses a prepared target whose columns cannot take every source value (the rule: columnFit
 * above), naming each such column and the ALTER that fixes it; returns a note for
 * each column that takes the values in their text form.
 */
export async function assertColumnsFit(
  source: ClientBase,
  target: ClientBase,
  info: TableInfo,
  existing: TableInfo,
  copied: TableInfo['columns'],
  label: string,
  targetLabel: string,
): Promise<string[]> {
  const [mine, theirs, implicit] = await Promise.all([readColumnTypes(source, info.oid), readColumnTypes(target, existing.oid), readImplicitCasts(target)]);
  const misfits: string[] = [];
  const fixes: string[] = [];
  const notes: string[] = [];
  const sameUserTypes = new Map<number, string>();
  for (const column of copied) {
    const from = mine.get(column.name)!;
    const to = theirs.get(column.name)!;
    const fit = columnFit(from, to, implicit.has(`${from.typeOid}>${to.typeOid}`));
    if (fit === 'no') {
      misfits.push(`column "${column.name}" is ${to.type} but ${from.type} on the source`);
      fixes.push(`ALTER COLUMN ${displayIdent(column.name)} TYPE ${from.type}`);
    } else if (fit === 'text') {
      notes.push(`column "${column.name}" is ${to.type} on the target, ${from.type} on the source: values arrive in their text form`);
    } else if (fit === 'same') {
      sameUserTypes.set(from.typeOid, column.name);
    }
  }
  // An enum of the same name must have every label the source's has.
  const typeFixes: string[] = [];
  const enums = (await readUserTypes(source, [...sameUserTypes.keys()])).filter((t) => t.kind === 'e' && sameUserTypes.has(t.oid));
  for (const type of enums) {
    const there = (await typeExists(target, type.name))?.labels ?? [];
    const missing = type.enumLabels.filter((l) => !there.includes(l));
    if (missing.length === 0) continue;
    misfits.push(`column "${sameUserTypes.get(type.oid)}" is enum ${displayQualified(type.name)}, which lacks ${missing.map((m) => `'${m}'`).join(', ')} on the target`);
    typeFixes.push(...missing.map((m) => `ALTER TYPE ${displayQualified(type.name)} ADD VALUE ${escapeLiteral(m)}`));
  }
  if (misfits.length > 0) {
    const alter = [...(fixes.length ? [`ALTER TABLE ${targetLabel} ${fixes.join(', ')}`] : []), ...typeFixes].join('; ');
    throw refusal(
      FAILURE.IncompatibleTarget,
      `target table ${targetLabel} cannot take every value of source ${label}: ${misfits.join('; ')}; ` +
        `give the target the source's types (${alter}) or drop the target table so Ferry creates it`,
    );
  }
  return notes;
}
