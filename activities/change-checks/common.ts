/**
 * What the per-kind checks of a change plan's preflight share: the decision they record for the
 * workflow, what earlier steps of the plan declare (tables, columns, constraints, NOT NULLs that
 * count as present), and catalog lookups.
 */
import { ClientBase } from 'pg';
import { ChangePlan, ChangeStep } from '../../src/core/change-plan';
import { QualifiedName, quoteQualified } from '../../src/core/identifiers';

/** What preflight decided per step; the workflow runs the steps with it. */
export interface StepDecision {
  index: number;
  /** sql steps: run as written, or SET NOT NULL in its safe form. */
  action?: 'run' | 'setNotNull';
  setNotNull?: { table: QualifiedName; column: string };
  /** The same for the step's down:, when it has one. */
  downAction?: 'run' | 'setNotNull';
  downSetNotNull?: { table: QualifiedName; column: string };
  /** index steps: the index was there, valid, before the plan ran (a rollback leaves it). */
  indexExisted?: boolean;
  /** A line for the status (what runs instead, what the step will find). */
  note?: string;
}

export interface Declared {
  tables: Set<string>;
  columns: Set<string>;
  constraints: Set<string>;
  /** Columns an earlier step sets NOT NULL. */
  notNull: Set<string>;
}

export const key = (t: QualifiedName, part?: string) => JSON.stringify([t.schema, t.name, part ?? '']);

/** One step kind's preflight: the problems found (each a path below the step's, `.sql: …`), the decision recorded. */
export type StepCheck<S extends ChangeStep> = (db: ClientBase, plan: ChangePlan, step: S, decision: StepDecision, declared: Declared, changeId: string) => Promise<string[]>;

export async function relation(db: ClientBase, table: QualifiedName): Promise<{ oid: number; relkind: string; reltuples: number } | undefined> {
  const { rows } = await db.query(
    `SELECT c.oid::int8 AS oid, c.relkind::text AS relkind, c.reltuples::float8 AS reltuples FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($1)`,
    [quoteQualified(table)],
  );
  return rows[0] ? { oid: Number(rows[0].oid), relkind: rows[0].relkind, reltuples: Number(rows[0].reltuples) } : undefined;
}

export async function columnsOf(db: ClientBase, oid: number): Promise<Map<string, { generated: boolean; inKey: boolean }>> {
  const { rows } = await db.query(
    `SELECT a.attname::text AS name, a.attgenerated <> '' AS generated,
            EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY (i.indkey)) AS in_key
       FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`,
    [oid],
  );
  return new Map(rows.map((r) => [r.name as string, { generated: r.generated as boolean, inKey: r.in_key as boolean }]));
}

export function declaredTouches(declared: Declared, table: QualifiedName): boolean {
  const prefix = JSON.stringify([table.schema, table.name]).slice(0, -1);
  return [...declared.columns, ...declared.tables].some((k) => k.startsWith(prefix));
}
