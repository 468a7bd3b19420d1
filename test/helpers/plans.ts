/** Plans the workflow-logic tests hand their fake preflight. */

/** One large table and eight small ones (one chunk, a hundred rows: src/core/plan.ts isSmallTable). */
export function mixedTables() {
  const table = (index: number, rowsEstimated: number, chunks: number) => ({
    index,
    source: { schema: 'public', name: `t${index}` },
    target: { schema: 'public', name: `t${index}` },
    columns: ['id'],
    keyColumns: [{ name: 'id', type: 'bigint', collatable: false }],
    copyFormat: 'binary' as const,
    keyCollateC: false,
    rowsEstimated,
    chunks: chunks === 1 ? [{ index: 0, lower: null, upper: null }] : [{ index: 0, lower: null, upper: ['10'] }, { index: 1, lower: ['10'], upper: null }],
    targetExisted: false,
    sourceWrites: 0,
  });
  return [table(0, 500_000, 2), ...Array.from({ length: 8 }, (_, i) => table(i + 1, 100, 1))];
}
