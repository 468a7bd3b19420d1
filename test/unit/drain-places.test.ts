/**
 * The cutover's drain runs every group of tables at once, several tables per activity: the
 * tables a worker drains at once must stay within its places (its activity slots), or each
 * activity's tables multiply its sessions — 300 tables on two workers ran the shared server
 * out of connections. Real activity contexts (MockActivityEnvironment), fake drain parts.
 */
import { CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createDrainTables, DrainParts, DrainTablesInput } from '../../activities/drain';
import { Limiter } from '../../src/core/limiter';
import type { CopyTable } from '../../src/core/plan';

const table = (index: number) => ({ index, source: { schema: 's', name: `t${index}` } }) as unknown as CopyTable;

function input(first: number, count: number): DrainTablesInput {
  return {
    migrationId: 'm',
    source: 'src',
    target: 'dst',
    tables: Array.from({ length: count }, (_, i) => table(first + i)),
    fence: 1,
    sliceMs: 1_000,
    batchKeys: 100,
    check: true,
  };
}

/**
 * Parts whose slices each take a few ms, counting the tables under way at once; the seal finds
 * the tables of `quiet` quiet.
 */
function countingParts(quiet = new Set<number>()) {
  let now = 0;
  const seen = { peak: 0, tables: new Set<number>(), seals: [] as { token: number; tables: number[] }[], fences: [] as number[], checkedSlices: [] as { index: number; seal?: boolean }[] };
  const parts: DrainParts = {
    async sealGroup(group, token) {
      seen.seals.push({ token, tables: group.tables.map((t) => t.index) });
      return group.tables.map((t) => t.index).filter((index) => quiet.has(index));
    },
    async syncChanges(slice) {
      seen.fences.push(slice.fence);
      if (slice.captureChecked) seen.checkedSlices.push({ index: slice.table.index, seal: slice.seal });
      now += 1;
      seen.peak = Math.max(seen.peak, now);
      seen.tables.add(slice.table.index);
      await new Promise((resolve) => setTimeout(resolve, 5));
      now -= 1;
      return { caughtUp: true, pending: 0 };
    },
    async checkDirtyKeys() {
      return { checked: 1, mismatched: 0, remaining: 0 };
    },
  };
  return { parts, seen };
}

const run = <T>(fn: () => Promise<T>) => new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') }).run(fn) as Promise<T>;

describe("the cutover's drain", () => {
  it("drains no more tables at once across a worker's activities than it has places", async () => {
    const { parts, seen } = countingParts();
    const drainTables = createDrainTables(parts, new Limiter(3));
    const results = await Promise.all([0, 1, 2].map((g) => run(() => drainTables(input(g * 10, 10)))));
    expect(results.map((r) => r.tables.length)).toEqual([10, 10, 10]);
    expect(results.flatMap((r) => r.tables.map((t) => t.checked))).toEqual(Array(30).fill(1));
    expect(seen.tables.size).toBe(30);
    // Three activities of four tables at once would be twelve.
    expect(seen.peak).toBe(3);
  });

  it('still drains four tables of a group at once when the places allow', async () => {
    const { parts, seen } = countingParts();
    const drainTables = createDrainTables(parts, new Limiter(8));
    await run(() => drainTables(input(0, 10)));
    expect(seen.peak).toBe(4);
  });

  it('seals the whole group first and drains only the tables the seal did not find quiet, above its fence', async () => {
    const { parts, seen } = countingParts(new Set([1, 3, 4]));
    const drainTables = createDrainTables(parts, new Limiter(8));
    const { tables } = await run(() => drainTables(input(0, 6)));
    expect(seen.seals).toEqual([{ token: 1 * 1000 + 1, tables: [0, 1, 2, 3, 4, 5] }]);
    expect([...seen.tables].sort()).toEqual([0, 2, 5]);
    // Every slice's fence is above the seal's (the fence of slice 0).
    expect(Math.min(...seen.fences)).toBe(2);
    // Each drained table's first slice seals it again, its capture checked by the group's seal just before.
    expect(seen.checkedSlices.sort((a, b) => a.index - b.index)).toEqual([0, 2, 5].map((index) => ({ index, seal: true })));
    expect(tables.map((t) => [t.index, t.checked])).toEqual([
      [0, 1],
      [1, 0],
      [2, 1],
      [3, 0],
      [4, 0],
      [5, 1],
    ]);
  });

  it('gives up a wait for a place when cancelled, and takes none', async () => {
    const places = new Limiter(1);
    const held = await places.acquire();
    const env = new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') });
    const { parts, seen } = countingParts();
    const waiting = env.run(() => createDrainTables(parts, places)(input(0, 2)));
    // The wait is under way once the activity has run its first turn.
    await new Promise((resolve) => setImmediate(resolve));
    env.cancel();
    await expect(waiting).rejects.toBeInstanceOf(CancelledFailure);
    expect(seen.tables.size).toBe(0);
    held();
    // Its place was not taken: the next one gets it at once.
    const next = await places.acquire();
    next();
  });
});
