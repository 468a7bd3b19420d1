/** A `validate` step's preflight: the table, and a CHECK or FOREIGN KEY of that name (or an earlier step's). */
import { ValidateStep } from '../../src/core/change-plan';
import { displayQualified, quoteQualified } from '../../src/core/identifiers';
import { key, relation, StepCheck } from './common';

export const checkValidate: StepCheck<ValidateStep> = async (db, _plan, step, decision, declared) => {
  const table = await relation(db, step.table);
  if (!table && !declared.tables.has(key(step.table))) return [`.validate.table: ${displayQualified(step.table)} does not exist`];
  if (declared.constraints.has(key(step.table, step.constraint))) return [];
  const { rows } = await db.query(`SELECT contype::text AS type, convalidated AS valid FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2`, [
    quoteQualified(step.table),
    step.constraint,
  ]);
  if (rows.length === 0) return [`.validate.constraint: ${displayQualified(step.table)} has no constraint "${step.constraint}" (and no earlier step adds it)`];
  if (!['c', 'f'].includes(rows[0].type)) return [`.validate.constraint: "${step.constraint}" is not a CHECK or FOREIGN KEY constraint`];
  if (rows[0].valid) decision.note = 'already validated: the step will find nothing to do';
  return [];
};
