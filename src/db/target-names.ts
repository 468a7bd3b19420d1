/**
 * Free names on the target for the relations a created table brings: its primary key, unique and
 * exclusion constraints and indexes (preflight decides, TablePlan.targetNames carries them).
 */
import { ClientBase } from 'pg';
import { displayIdent, quoteQualified, withSuffix } from '../core/identifiers';
import { TableSpec } from '../core/spec';
import { TableInfo } from './catalog';

/**
 * The relation names of the target schemas: those there already, and those this migration's
 * earlier tables will create (two source schemas can both have an `orders_pkey`).
 */
export class RelationNames {
  private readonly mine = new Set<string>();
  constructor(private readonly db: ClientBase) {}

  async taken(schema: string, name: string): Promise<boolean> {
    if (this.mine.has(JSON.stringify([schema, name]))) return true;
    const { rows } = await this.db.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified({ schema, name })]);
    return rows[0].present;
  }

  claim(schema: string, name: string): void {
    this.mine.add(JSON.stringify([schema, name]));
  }
}

/**
 * Indexes, primary keys and unique or exclusion constraints are relations, named per schema: a
 * table copied next to its original (public.orders → public.orders_b) would meet orders_pkey.
 * A name that is taken gets the one PostgreSQL itself would choose for the new table (the source
 * table's name in front replaced by the target's: orders_b_pkey), numbered until free. Renaming,
 * not refusing, is what copying a table under a new name asks for; the new names go into the
 * plan (prepareTarget and the index builds use them) and into its notes. They belong to the
 * table Ferry creates, so rollback drops them with it and touches nothing of the original.
 */
export async function chooseIndexNames(info: TableInfo, table: TableSpec, claimed: RelationNames): Promise<{ targetNames: Record<string, string>; notes: string[] }> {
  const { schema } = table.target;
  const targetNames: Record<string, string> = {};
  const notes: string[] = [];
  const kinds: [string, string][] = [
    ...(info.primaryKey ? [['primary key', info.primaryKey.name] as [string, string]] : []),
    ...info.uniques.map((u): [string, string] => [/^EXCLUDE/.test(u.definition) ? 'exclusion constraint' : 'unique constraint', u.name]),
    ...info.indexes.map((i): [string, string] => ['index', i.name]),
  ];
  claimed.claim(schema, table.target.name);
  for (const [kind, name] of kinds) {
    let chosen = name;
    if (await claimed.taken(schema, name)) {
      const prefix = `${table.source.name}_`;
      const base = name.startsWith(prefix) ? withSuffix(table.target.name, `_${name.slice(prefix.length)}`) : name;
      chosen = base;
      for (let n = 1; chosen === name || (await claimed.taken(schema, chosen)); n += 1) chosen = withSuffix(base, String(n));
      targetNames[name] = chosen;
      notes.push(`${kind} ${displayIdent(name)} is created as ${displayIdent(chosen)}: schema ${displayIdent(schema)} already has a relation ${displayIdent(name)}`);
    }
    claimed.claim(schema, chosen);
  }
  return { targetNames, notes };
}
