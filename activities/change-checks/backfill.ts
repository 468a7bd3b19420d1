/** A `backfill` step's preflight: its expressions alone, the table and its key, the columns it sets, the UPDATE planned but not run. */
import { BackfillStep } from '../../src/core/change-plan';
import { displayQualified, quoteIdent, quoteQualified } from '../../src/core/identifiers';
import { backfillExpressionProblems } from '../../src/change/statements';
import { columnsOf, declaredTouches, key, relation, StepCheck } from './common';

export const checkBackfill: StepCheck<BackfillStep> = async (db, _plan, step, decision, declared) => {
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
};
