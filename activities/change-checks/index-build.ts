/** An `index` step's preflight: its condition alone, the table and columns, an index of its name (the one asked for, or refused). */
import { IndexStep } from '../../src/core/change-plan';
import { displayQualified } from '../../src/core/identifiers';
import { expressionRefusal } from '../../src/change/statements';
import { indexDifference } from '../../src/db/index-difference';
import { columnsOf, key, relation, StepCheck } from './common';

export const checkIndex: StepCheck<IndexStep> = async (db, _plan, step, decision, declared) => {
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
};
