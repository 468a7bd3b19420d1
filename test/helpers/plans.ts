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

/** How many of mixedTables' small and large tables copy at once, and the most seen. */
export class CopyTally {
  small = 0;
  large = 0;
  maxSmall = 0;
  /** Copies that began while a table of the other kind was copying. */
  smallBesideLarge = 0;

  reset(): void {
    Object.assign(this, { small: 0, large: 0, maxSmall: 0, smallBesideLarge: 0 });
  }

  /** Counts table `index`'s copy (0 is the large one) while `copy` runs. */
  async during<T>(index: number, copy: () => Promise<T>): Promise<T> {
    const kind = index === 0 ? 'large' : 'small';
    this[kind] += 1;
    this.maxSmall = Math.max(this.maxSmall, this.small);
    if (this.small > 0 && this.large > 0) this.smallBesideLarge += 1;
    try {
      return await copy();
    } finally {
      this[kind] -= 1;
    }
  }
}
