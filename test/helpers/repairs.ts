/**
 * Validation's repair is a safety net: a run nobody damaged must not need it, or a loss that it
 * quietly mended would pass every row-for-row comparison afterwards. Every such run asserts it.
 */
import type { ResultDocument } from '../../src/core/status';

/**
 * Every table was validated (a ValidationPassed of its own, in full and online mode alike) and
 * none needed a range repaired: the copy and the sync alone made the target equal.
 */
export function expectNothingRepaired(result: ResultDocument): void {
  const passed = result.events.filter((e) => e.type === 'ValidationPassed');
  expect(passed.map((e) => e.table).sort()).toEqual(result.tables.map((t) => t.source).sort());
  expect(passed.map((e) => ({ table: e.table, repairedRanges: e.detail?.repairedRanges }))).toEqual(passed.map((e) => ({ table: e.table, repairedRanges: 0 })));
}
