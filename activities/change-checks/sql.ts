/**
 * A `sql` step's preflight: each statement (and its down:) parsed with PostgreSQL's parser and
 * judged against the catalog; SET NOT NULL decided into its safe form; what the statement
 * creates declared for the steps after it.
 */
import { ClientBase } from 'pg';
import { ChangePlan, SqlStep } from '../../src/core/change-plan';
import { declaredBy, judgeStatement, parseStatements, shapeRefusal } from '../../src/change/statements';
import { Declared, key, StepCheck, StepDecision } from './common';

export const checkSqlStep: StepCheck<SqlStep> = (db, plan, step, decision, declared) => checkSql(db, plan, step.sql, step.down, decision, declared);

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
