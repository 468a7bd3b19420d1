/**
 * DDL for the target, derived from the source's catalog: user types, sequences, the table with
 * its columns, defaults, CHECK constraints and primary key, and — after the load — indexes,
 * unique constraints and foreign keys. Definitions come from pg_get_*def (qualified, because
 * the session's search_path is empty); only table and sequence names are rewritten.
 */
import { escapeLiteral } from 'pg';
import { QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import { ConstraintInfo, ForeignKeyInfo, SequenceInfo, TableInfo, UserTypeInfo } from './catalog';

export function createTypeSql(type: UserTypeInfo): string {
  const name = quoteQualified(type.name);
  if (type.kind === 'e') {
    return `CREATE TYPE ${name} AS ENUM (${type.enumLabels.map((l) => escapeLiteral(l)).join(', ')})`;
  }
  if (type.kind === 'd') {
    const parts = [`CREATE DOMAIN ${name} AS ${type.domainBase}`];
    if (type.domainDefault !== null) parts.push(`DEFAULT ${type.domainDefault}`);
    if (type.domainNotNull) parts.push('NOT NULL');
    for (const check of type.domainChecks) parts.push(`CONSTRAINT ${quoteIdent(check.name)} ${check.definition}`);
    return parts.join(' ');
  }
  throw new Error(`type kind ${type.kind} is not created by Ferry`);
}

/**
 * Where a table's serial sequence would go on the target: the target table's schema, same name.
 * prepareTarget takes another name when that one is taken (see freeSequenceName).
 */
export function targetSequenceName(seq: SequenceInfo, target: QualifiedName): QualifiedName {
  return { schema: target.schema, name: seq.name.name };
}

/** The target name of each serial sequence, by the source's regclass text of it. */
export type SequenceNames = Map<string, QualifiedName>;

export function createSequenceSql(seq: SequenceInfo, name: QualifiedName): string {
  return `CREATE SEQUENCE ${quoteQualified(name)} AS ${seq.dataType} ${seq.definition}`;
}

function regclassLiteral(name: QualifiedName): string {
  return `${escapeLiteral(quoteQualified(name))}::regclass`;
}

/**
 * CREATE TABLE with columns, NOT NULL, defaults, generated and identity columns, CHECKs and the
 * primary key; a partitioned table with its partition key (its partitions: src/db/partitions.ts).
 * A serial column's default names the sequence `sequences` chose for it.
 */
export function createTableSql(
  info: TableInfo,
  target: QualifiedName,
  sequences: SequenceNames,
  options: { primaryKey?: boolean; primaryKeyName?: string } = {},
): string {
  const lines: string[] = [];
  for (const column of info.columns) {
    let line = `${quoteIdent(column.name)} ${column.type}`;
    if (column.collation) line += ` COLLATE ${column.collation}`;
    const sequence = info.sequences.find((s) => s.column === column.name);
    if (column.generated) {
      line += ` GENERATED ALWAYS AS (${column.generationExpr}) STORED`;
    } else if (column.identity !== '' && sequence) {
      line += ` GENERATED ${column.identity === 'a' ? 'ALWAYS' : 'BY DEFAULT'} AS IDENTITY (${sequence.definition})`;
    } else if (column.defaultExpr !== null) {
      let expr = column.defaultExpr;
      for (const serial of info.sequences.filter((s) => s.column === column.name && !s.identity)) {
        const name = sequences.get(serial.regclassText);
        if (!name) throw new Error(`no target name chosen for sequence ${serial.regclassText}`);
        expr = expr.split(`${escapeLiteral(serial.regclassText)}::regclass`).join(regclassLiteral(name));
      }
      line += ` DEFAULT ${expr}`;
    }
    if (column.notNull) line += ' NOT NULL';
    lines.push(line);
  }
  for (const check of info.checks) lines.push(`CONSTRAINT ${quoteIdent(check.name)} ${check.definition}`);
  // Without it, a load writes no index at all; addPrimaryKeySql builds it afterwards.
  if (info.primaryKey && options.primaryKey !== false) lines.push(`CONSTRAINT ${quoteIdent(options.primaryKeyName ?? info.primaryKey.name)} ${info.primaryKey.definition}`);
  const partitioned = info.partitionKey ? ` PARTITION BY ${info.partitionKey}` : '';
  return `CREATE TABLE ${quoteQualified(target)} (\n  ${lines.join(',\n  ')}\n)${partitioned}`;
}

/**
 * Where `marker` first occurs outside double-quoted identifiers: an index or column may be named
 * `x ON public.t USING y`, and splitting inside that name would build broken (or other) SQL.
 */
function indexOutsideQuotes(def: string, marker: string): number {
  let quoted = false;
  for (let i = 0; i < def.length; i += 1) {
    if (!quoted && def.startsWith(marker, i)) return i;
    if (def[i] === '"') quoted = !quoted; // a doubled "" flips twice
  }
  return -1;
}

/** CREATE INDEX IF NOT EXISTS on the target table, from the source's pg_get_indexdef, named `name`. */
export function createIndexSql(index: ConstraintInfo, info: TableInfo, target: QualifiedName, name = index.name): string {
  const def = index.definition;
  // The first match of either form: a predicate's string literal later on may contain the other.
  const [found] = [' ON ', ' ON ONLY ']
    .map((on) => `${on}${info.identText} USING `)
    .map((marker) => ({ marker, at: indexOutsideQuotes(def, marker) }))
    .filter((m) => m.at >= 0)
    .sort((a, b) => a.at - b.at);
  if (!found) throw new Error(`cannot read index definition of ${index.name}`);
  const prefix = /^CREATE (UNIQUE )?INDEX /.exec(def);
  if (!prefix) throw new Error(`cannot read index definition of ${index.name}`);
  // The head is `CREATE [UNIQUE] INDEX <name>`: the name is replaced, not edited in place.
  const head = `${prefix[0]}IF NOT EXISTS ${quoteIdent(name)}`;
  return `${head} ON ${quoteQualified(target)} USING ${def.slice(found.at + found.marker.length)}`;
}

export function addConstraintSql(constraint: ConstraintInfo, target: QualifiedName, name = constraint.name): string {
  return `ALTER TABLE ${quoteQualified(target)} ADD CONSTRAINT ${quoteIdent(name)} ${constraint.definition}`;
}

/** FOREIGN KEY … REFERENCES <mapped target> …, added NOT VALID (validated in a second step). */
export function addForeignKeySql(fk: ForeignKeyInfo, target: QualifiedName, referencedTarget: QualifiedName): string {
  return `ALTER TABLE ${quoteQualified(target)} ADD CONSTRAINT ${quoteIdent(fk.name)} ${foreignKeyDefinition(fk, referencedTarget)}`;
}

/** The key's definition (`FOREIGN KEY (…) REFERENCES … NOT VALID`), pointing at the referenced table's target. */
export function foreignKeyDefinition(fk: ForeignKeyInfo, referencedTarget: QualifiedName): string {
  const marker = ` REFERENCES ${fk.referencedText}(`;
  const at = indexOutsideQuotes(fk.definition, marker);
  if (at < 0) throw new Error(`cannot read foreign key definition of ${fk.name}`);
  const definition = fk.definition.slice(0, at) + ` REFERENCES ${quoteQualified(referencedTarget)}(` + fk.definition.slice(at + marker.length);
  return / NOT VALID$/.test(definition) ? definition : `${definition} NOT VALID`;
}

/**
 * The primary key built after a load into a table created without it: its unique index from
 * the source's definition (one sort of the loaded rows), then the constraint on that index —
 * a catalog change, since the key columns are already NOT NULL. A DEFERRABLE key stays so (the
 * constraint's definition ends with its deferrability).
 */
export function addPrimaryKeySql(info: TableInfo, target: QualifiedName, indexDefinition: string, name = info.primaryKey!.name): string[] {
  const pk = info.primaryKey!;
  const deferrable = / (DEFERRABLE(?: INITIALLY (?:DEFERRED|IMMEDIATE))?)$/.exec(pk.definition);
  return [
    createIndexSql({ name: pk.name, definition: indexDefinition }, info, target, name),
    `ALTER TABLE ${quoteQualified(target)} ADD CONSTRAINT ${quoteIdent(name)} PRIMARY KEY USING INDEX ${quoteIdent(name)}${deferrable ? ` ${deferrable[1]}` : ''}`,
  ];
}
