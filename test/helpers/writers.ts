/**
 * Application-like writers for online-migration tests: concurrent sessions that insert, update
 * (also primary keys), delete, delete-and-reinsert, and hold transactions open so an early log
 * entry commits late. They stop when the source is frozen (and say what the freeze told them).
 */
import { Client } from 'pg';
import type { FerryClient } from '../../src/client';
import type { ResultDocument } from '../../src/core/status';
import { eventually, resultWithin, waitForPhase } from './stack';

export interface WriterStats {
  operations: number;
  /** Operations that succeeded, per kind (the label the operation was given). */
  byKind: Record<string, number>;
  lateCommits: number;
  frozenErrors: string[];
  otherErrors: string[];
}

export interface Writers {
  stats: WriterStats;
  stop(): Promise<void>;
}

/** One kind of write: a label for the statistics, and the statements it runs. */
export interface WriterOp {
  kind: string;
  run: () => Promise<unknown>;
}

export interface WriterContext {
  client: Client;
  /** The writer's number. */
  w: number;
  /** A fresh id, unique across the writers of one run. */
  nextId: () => number;
  stats: WriterStats;
}

/** Errors that concurrent writers of one table cause each other: retried by the next operation. */
const EXPECTED = /duplicate key|deadlock|moved to another partition/;

function pick<T>(items: T[]): T {
  return items[Math.floor(Math.random() * items.length)];
}

/**
 * Starts `count` writers, each running a random one of `ops(context)` in a loop until stopped
 * or frozen.
 */
export async function runWriters(url: string, count: number, ops: (ctx: WriterContext) => WriterOp[]): Promise<Writers> {
  const stats: WriterStats = { operations: 0, byKind: {}, lateCommits: 0, frozenErrors: [], otherErrors: [] };
  let running = true;
  let id = 10_000_000;
  const nextId = () => id++;
  const loops: Promise<void>[] = [];
  for (let w = 0; w < count; w += 1) {
    const client = new Client({ connectionString: url });
    await client.connect();
    client.on('error', () => undefined);
    const mine = ops({ client, w, nextId, stats });
    loops.push(
      (async () => {
        while (running) {
          const op = pick(mine);
          try {
            await op.run();
            stats.operations += 1;
            stats.byKind[op.kind] = (stats.byKind[op.kind] ?? 0) + 1;
          } catch (err) {
            await client.query('ROLLBACK').catch(() => undefined);
            const message = (err as Error).message;
            if (/frozen/.test(message)) {
              stats.frozenErrors.push(message);
              break;
            }
            if (!EXPECTED.test(message)) stats.otherErrors.push(message);
          }
          await new Promise((r) => setTimeout(r, 5));
        }
        await client.end().catch(() => undefined);
      })(),
    );
  }
  return {
    stats,
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

/** Starts `count` writers on `accounts (id bigint PK, balance, note)` and `items ((a, b) PK, v)`. */
export function startWriters(url: string, count: number): Promise<Writers> {
  return runWriters(url, count, ({ client, w, nextId, stats }) => {
    const id = () => 1 + Math.floor(Math.random() * 5000);
    return [
      { kind: 'insert', run: () => client.query('INSERT INTO public.accounts (id, balance, note) VALUES ($1, $2, $3)', [nextId(), Math.random() * 100, `new ${w}`]) },
      { kind: 'update', run: () => client.query('UPDATE public.accounts SET balance = balance + 1, note = $2 WHERE id = $1', [id(), `updated by ${w}`]) },
      { kind: 'update key', run: () => client.query('UPDATE public.accounts SET id = $2 WHERE id = $1', [id(), nextId()]) },
      { kind: 'delete', run: () => client.query('DELETE FROM public.accounts WHERE id = $1', [id()]) },
      {
        kind: 'delete and reinsert',
        run: async () => {
          const k = id();
          await client.query('BEGIN');
          await client.query('DELETE FROM public.accounts WHERE id = $1', [k]);
          await client.query('INSERT INTO public.accounts (id, balance, note) VALUES ($1, 0, $2)', [k, 'reinserted']);
          await client.query('COMMIT');
        },
      },
      { kind: 'update items', run: () => client.query('UPDATE public.items SET v = v + 1 WHERE a = $1', [id() % 40]) },
      {
        kind: 'update items key',
        run: () => {
          const a = id() % 40;
          return client.query(`UPDATE public.items SET b = b || '+' WHERE a = $1 AND b = (SELECT min(b) FROM public.items WHERE a = $1)`, [a]);
        },
      },
      { kind: 'insert items', run: () => client.query('INSERT INTO public.items (a, b, v) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING', [id() % 40, `w${w}-${nextId()}`]) },
      {
        kind: 'late commit',
        run: async () => {
          // Takes a log id early, commits late: a watermark would skip this change.
          await client.query('BEGIN');
          await client.query('UPDATE public.accounts SET note = $2 WHERE id = $1', [id(), `late ${w}`]);
          await new Promise((r) => setTimeout(r, 300 + Math.random() * 700));
          await client.query('COMMIT');
          stats.lateCommits += 1;
        },
      },
    ];
  });
}

/**
 * An online migration at its approval once every one of the writers' `kinds` kinds of write has
 * happened at least three times while capture was in place, approved, and its result; the writers
 * are stopped either way.
 */
export async function approveUnderWriters(ferry: FerryClient, id: string, writers: Writers, kinds: number, timeoutMs: number): Promise<ResultDocument> {
  try {
    await waitForPhase(ferry, id, 'AWAITING_APPROVAL');
    await eventually(async () => Object.keys(writers.stats.byKind).length === kinds && Object.values(writers.stats.byKind).every((n) => n >= 3), 60_000);
    await ferry.approve(id);
    return await resultWithin(ferry, id, timeoutMs);
  } finally {
    await writers.stop();
  }
}

/** Writers that stopped on the cutover's freeze, and on nothing else. */
export function expectStoppedByFreeze(stats: WriterStats): void {
  expect(stats.otherErrors).toEqual([]);
  expect(stats.frozenErrors.length).toBeGreaterThan(0);
}
