/**
 * What checkPlan and checkTables accept: a plan that lists its tables, the header of one stored
 * on the target (MigrationPlan.stored, no tables), the helper's first page (moreTables); and
 * what they refuse, naming the field.
 */
import { checkPlan, checkTables, TablePlan } from '../../src/core/plan';

const table: TablePlan = {
  index: 0,
  source: { schema: 'public', name: 'a' },
  target: { schema: 'public', name: 'a' },
  columns: ['id'],
  keyColumns: [{ name: 'id', type: 'bigint', collatable: false }],
  copyFormat: 'binary',
  keyCollateC: false,
  rowsEstimated: 10,
  chunks: [{ index: 0, lower: null, upper: null }],
  targetExisted: false,
  sourceWrites: 0,
};
const header = { sourceServer: '15.4', targetServer: '15.4' };

describe('checkPlan and checkTables', () => {
  it('accept a listed plan, a stored plan without its tables, and the first page with a count of the rest', () => {
    expect(checkPlan({ ...header, tables: [table] }).ok).toBe(true);
    expect(checkPlan({ ...header, tables: [], stored: { tables: 600 } })).toEqual({ ok: true, plan: { ...header, tables: [], stored: { tables: 600 } } });
    expect(checkPlan({ ...header, tables: [table], moreTables: 20 }).ok).toBe(true);
    expect(checkTables([table, { ...table, index: 1 }])).toEqual({ ok: true, tables: [table, { ...table, index: 1 }] });
  });

  it('refuse a plan without tables that is not stored, and stored tables that are not a plan\'s', () => {
    expect(checkPlan({ ...header, tables: [] })).toEqual({ ok: false, reason: 'plan.tables: a plan lists at least one table' });
    expect(checkPlan({ ...header, tables: [], stored: { tables: 0 } })).toMatchObject({ ok: false, reason: expect.stringContaining('plan.stored.tables') });
    expect(checkTables([{ ...table, copyFormat: 'csv' }])).toMatchObject({ ok: false, reason: expect.stringContaining('plan.tables.0.copyFormat') });
    expect(checkTables({ tables: [table] })).toMatchObject({ ok: false, reason: expect.stringMatching(/^plan\.tables: /) });
  });
});
