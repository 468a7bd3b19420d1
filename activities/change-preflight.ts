/**
 * changePreflight: reads the plan against the database before anything changes, and refuses
 * what cannot work or would hold a large table under an exclusive lock — every problem at once,
 * each with the step's path, as one non-retryable ChangeRefused failure (`ferry start` exits 2).
 * Tables, columns and constraints an earlier step of the plan creates count as present.
 */
import { ClientBase } from 'pg';
import { ChangePlan, ChangeStep } from '../src/core/change-plan';
import { FAILURE } from '../src/core/failure-types';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified } from '../src/core/identifiers';
import { backfillExpressionProblems, declaredBy, expressionRefusal, judgeStatement, parseStatements, shapeRefusal } from '../src/change/statements';
import { refusal } from '../src/db/errors';
import { indexDifference } from './change-index';
import { ActivityDeps } from './deps';
import { rewriteProblems } from './rewrite';

export interface ChangePreflightInput {
  changeId: string;
  plan: ChangePlan;
}

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

export interface ChangePreflightResult {
  serverVersion: string;
  steps: StepDecision[];
}

interface Declared {
  tables: Set<string>;
  columns: Set<string>;
  constraints: Set<string>;
  /** Columns an earlier step sets NOT NULL. */
  notNull: Set<string>;
}

const key = (t: QualifiedName, part?: string) => JSON.stringify([t.schema, t.name, part ?? '']);

export function createChangePreflight({ connections }: ActivityDeps) {
  return async function changePreflight({ changeId, plan }: ChangePreflightInput): Promise<ChangePreflightResult> {
    return connections.withClient(plan.database, async (db) => {
      const serverVersion = (await db.query('SHOW server_version')).rows[0].server_version as string;
      const problems: string[] = [];
      const declared: Declared = { tables: new Set(), columns: new Set(), constraints: new Set(), notNull: new Set() };
      const decisions: StepDecision[] = [];
      for (const step of plan.steps) {
        const path = `steps[${step.index}]`;
        const decision: StepDecision = { index: step.index };
        const found = await checkStep(db, plan, step, decision, declared, changeId);
        problems.push(...found.map((p) => `${path}${p}`));
        decisions.push(decision);
      }
      if (problems.length) {
        throw refusal(FAILURE.ChangeRefused, `the change plan was refused; nothing was changed:\n${problems.map((p) => `  ${p}`).join('\n')}`);
      }
      return { serverVersion, steps: decisions };
    });
  };
}

async function checkStep(db: ClientBase, plan: ChangePlan, step: ChangeStep, decision: StepDecision, declared: Declared, changeId: string): Promise<string[]> {
  switch (step.kind) {
    case 'rewrite': {
      // The shadow is built in a transaction that is rolled back: every alter, expression and
      // carried object is tried on the real catalog, and nothing stays.
      const { problems } = await rewriteProblems(db, changeId, step, false);
      decision.note = 'shadow copy, capture, sync, validation, swap';
      return problems.map((p) => (p.startsWith('.') ? `.rewrite${p}` : `.rewrite.table${p}`));
    }
    case 'sql':
      return checkSql(db, plan, step.sql, step.down, decision, declared);
    case 'backfill':
      return checkBackfill(db, step, decision, declared);
    case 'index':
      return checkIndex(db, step, decision, declared);
    case 'validate': {
      const table = await relation(db, step.table);
      if (!table && !declared.tables.has(key(step.table))) return [`.validate.table: ${displayQualified(step.table)} does not exist`];
      if (declared.constraints.has(key(step.table, step.constraint))) return [];
      const { rows } = await db.query(
        `SELECT contype::text AS type, convalidated AS valid FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2`,
        [quoteQualified(step.table), step.constraint],
      );
      if (rows.length === 0) return [`.validate.constraint: ${displayQualified(step.table)} has no constraint "${step.constraint}" (and no earlier step adds it)`];
      if (!['c', 'f'].includes(rows[0].type)) return [`.validate.constraint: "${step.constraint}" is not a CHECK or FOREIGN KEY constraint`];
      if (rows[0].valid) decision.note = 'already validated: the step will find nothing to do';
      return [];
    }
  }
}

async function checkSql(db: ClientBase, plan: ChangePlan, sql: string, down: string | undefined, decision: StepDecision, declared: Declared): Promise<string[]> {
  const problems: string[] = [];
  for (const [field, text] of [['sql', sql], ['down', down]] as const) {
    if (text === undefined) continue;
    const stmts = await parseStatements(text);
    if (typeof stmts === 'string') {
      problems.push(`.${field}: ${stmts}`);
      continue;
    }
    const shape = shapeRefusal(stmts, plan.database);
    if (shape) {
      problems.push(`.${field}: ${shape}`);
      continue;
    }
    const verdict = await judgeStatement(db, stmts[0], { notNullEarlier: (table, column) => declared.notNull.has(key(table, column)) });
    if (verdict.action === 'refuse') {
      problems.push(`.${field}: ${verdict.message}`);
      continue;
    }
    if (field === 'sql') {
      decision.action = verdict.action;
      if (verdict.action === 'setNotNull') {
        declared.notNull.add(key(verdict.table, verdict.column));
        decision.setNotNull = { table: verdict.table, column: verdict.column };
        decision.note = 'SET NOT NULL in its safe form: CHECK (… IS NOT NULL) NOT VALID, VALIDATE, SET NOT NULL, DROP the CHECK';
      }
      const d = declaredBy(stmts[0]);
      d.tables.forEach((t) => declared.tables.add(key(t)));
      d.columns.forEach((c) => declared.columns.add(key(c.table, c.column)));
      d.constraints.forEach((c) => declared.constraints.add(key(c.table, c.name)));
    } else {
      decision.downAction = verdict.action;
      if (verdict.action === 'setNotNull') decision.downSetNotNull = { table: verdict.table, column: verdict.column };
    }
  }
  return problems;
}

async function relation(db: ClientBase, table: QualifiedName): Promise<{ oid: number; relkind: string; reltuples: number } | undefined> {
  const { rows } = await db.query(
    `SELECT c.oid::int8 AS oid, c.relkind::text AS relkind, c.reltuples::float8 AS reltuples FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($1)`,
    [quoteQualified(table)],
  );
  return rows[0] ? { oid: Number(rows[0].oid), relkind: rows[0].relkind, reltuples: Number(rows[0].reltuples) } : undefined;
}

async function columnsOf(db: ClientBase, oid: number): Promise<Map<string, { generated: boolean; inKey: boolean }>> {
  const { rows } = await db.query(
    `SELECT a.attname::text AS name, a.attgenerated <> '' AS generated,
            EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY (i.indkey)) AS in_key
       FROM pg_catalog.pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`,
    [oid],
  );
  return new Map(rows.map((r) => [r.name as string, { generated: r.generated as boolean, inKey: r.in_key as boolean }]));
}

async function checkBackfill(db: ClientBase, step: Extract<ChangeStep, { kind: 'backfill' }>, decision: StepDecision, declared: Declared): Promise<string[]> {
  const problems: string[] = [];
  for (const problem of await backfillExpressionProblems(step)) problems.push(`.backfill.${problem}`);
  const table = await relation(db, step.table);
  const name = displayQualified(step.table);
  if (!table) {
    if (!declared.tables.has(key(step.table))) problems.push(`.backfill.table: ${name} does not exist (and no earlier step creates it)`);
    return problems;
  }
  if (!['r', 'p'].includes(table.relkind)) return [...problems, `.backfill.table: ${name} is not a table`];
  const columns = await columnsOf(db, table.oid);
  if (![...columns.values()].some((c) => c.inKey)) problems.push(`.backfill.table: ${name} has no primary key; a backfill walks the table in primary-key order`);
  let pending = false;
  for (const { column } of step.set) {
    const c = columns.get(column);
    if (!c) {
      if (declared.columns.has(key(step.table, column))) pending = true;
      else problems.push(`.backfill.set: ${name} has no column "${column}" (and no earlier step adds it)`);
    } else if (c.generated) problems.push(`.backfill.set: "${column}" is a generated column`);
    else if (c.inKey) problems.push(`.backfill.set: "${column}" is part of the primary key, which the backfill walks; it cannot change under it`);
  }
  decision.note = `~${Math.max(0, Math.round(table.reltuples))} rows`;
  // The whole statement, planned but not run, when everything it names exists already: wrong
  // types and unknown columns in the expressions are found now rather than at the first batch.
  if (!problems.length && !pending && !declaredTouches(declared, step.table)) {
    const set = step.set.map((s) => `${quoteIdent(s.column)} = (${s.expression})`).join(', ');
    try {
      await db.query('BEGIN READ ONLY');
      await db.query(`EXPLAIN UPDATE ${quoteQualified(step.table)} SET ${set}${step.where ? ` WHERE (${step.where})` : ''}`);
    } catch (err) {
      problems.push(`.backfill: the update does not plan: ${(err as Error).message}`);
    } finally {
      await db.query('ROLLBACK').catch(() => undefined);
    }
  }
  return problems;
}

function declaredTouches(declared: Declared, table: QualifiedName): boolean {
  const prefix = JSON.stringify([table.schema, table.name]).slice(0, -1);
  return [...declared.columns, ...declared.tables].some((k) => k.startsWith(prefix));
}

async function checkIndex(db: ClientBase, step: Extract<ChangeStep, { kind: 'index' }>, decision: StepDecision, declared: Declared): Promise<string[]> {
  const problems: string[] = [];
  const name = displayQualified(step.table);
  if (step.where !== undefined) {
    const bad = await expressionRefusal(step.where, 'condition');
    if (bad) problems.push(`.index.where: ${bad}`);
  }
  const table = await relation(db, step.table);
  if (!table) {
    if (!declared.tables.has(key(step.table))) problems.push(`.index.table: ${name} does not exist (and no earlier step creates it)`);
    return problems;
  }
  const existing = await relation(db, { schema: step.table.schema, name: step.name });
  if (step.rebuild) {
    if (!existing || existing.relkind !== 'i') problems.push(`.index.name: there is no index ${step.table.schema}.${step.name} to rebuild`);
    return problems;
  }
  const columns = await columnsOf(db, table.oid);
  for (const column of step.columns) {
    if (!columns.has(column) && !declared.columns.has(key(step.table, column))) problems.push(`.index.columns: ${name} has no column "${column}"`);
  }
  if (existing) {
    const { rows } = await db.query(`SELECT indrelid::int8 AS rel, indisvalid AS valid FROM pg_catalog.pg_index WHERE indexrelid = $1`, [existing.oid]);
    if (rows.length === 0 || Number(rows[0].rel) !== table.oid) problems.push(`.index.name: ${step.table.schema}.${step.name} exists and is not an index of ${name}`);
    else {
      const other = rows[0].valid ? await indexDifference(db, existing.oid, step) : undefined;
      if (other) problems.push(`.index.name: ${step.table.schema}.${step.name} exists with another definition (${other}): drop it, or give the step's index another name`);
      decision.indexExisted = rows[0].valid;
      decision.note = rows[0].valid ? 'the index exists: the step will check it and do nothing' : 'an INVALID index of this name exists: the step drops it and builds again';
    }
  }
  return problems;
}
