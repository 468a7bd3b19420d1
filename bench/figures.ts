/** What the benches compute from their runs. */

/** The middle value (of an even count, the upper of the two middle ones). */
export function median(values: number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
}
