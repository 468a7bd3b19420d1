/**
 * Application-like writers for online-migration tests: concurrent sessions that insert, update
 * (also primary keys), delete, delete-and-reinsert, and hold transactions open so an early log
 * entry commits late. They stop when the source is frozen (and say what the freeze told them).
 */
import { Client } from 'pg';

export interface WriterStats {
  operations: number;
  lateCommits: number;
  frozenErrors: string[];
  otherErrors: string[];
}

export interface Writers {
  stats: WriterStats;
  stop(): Promise<void>;
}

function pick<T>(items: T[]): T {
  return items[Math.floor(Math.random() * items.length)];
}

/** Starts `count` writers on `accounts (id bigint PK, balance, note)` and `items ((a, b) PK, v)`. */
export async function startWriters(url: string, count: number): Promise<Writers> {
  const stats: WriterStats = { operations: 0, lateCommits: 0, frozenErrors: [], otherErrors: [] };
  let running = true;
  let nextId = 10_000_000;
  const loops: Promise<void>[] = [];
  for (let w = 0; w < count; w += 1) {
    const client = new Client({ connectionString: url });
    await client.connect();
    client.on('error', () => undefined);
    loops.push(
      (async () => {
        while (running) {
          const id = 1 + Math.floor(Math.random() * 5000);
          const ops: (() => Promise<unknown>)[] = [
            () => client.query('INSERT INTO public.accounts (id, balance, note) VALUES ($1, $2, $3)', [nextId++, Math.random() * 100, `new ${w}`]),
            () => client.query('UPDATE public.accounts SET balance = balance + 1, note = $2 WHERE id = $1', [id, `updated by ${w}`]),
            () => client.query('UPDATE public.accounts SET id = $2 WHERE id = $1', [id, nextId++]),
            () => client.query('DELETE FROM public.accounts WHERE id = $1', [id]),
            async () => {
              await client.query('BEGIN');
              await client.query('DELETE FROM public.accounts WHERE id = $1', [id]);
              await client.query('INSERT INTO public.accounts (id, balance, note) VALUES ($1, 0, $2)', [id, 'reinserted']);
              await client.query('COMMIT');
            },
            () => client.query('UPDATE public.items SET v = v + 1 WHERE a = $1', [id % 40]),
            () => client.query(`UPDATE public.items SET b = b || '+' WHERE a = $1 AND b = (SELECT min(b) FROM public.items WHERE a = $1)`, [id % 40]),
            () => client.query('INSERT INTO public.items (a, b, v) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING', [id % 40, `w${w}-${nextId++}`]),
            async () => {
              // Takes a log id early, commits late: a watermark would skip this change.
              await client.query('BEGIN');
              await client.query('UPDATE public.accounts SET note = $2 WHERE id = $1', [id, `late ${w}`]);
              await new Promise((r) => setTimeout(r, 300 + Math.random() * 700));
              await client.query('COMMIT');
              stats.lateCommits += 1;
            },
          ];
          try {
            await pick(ops)();
            stats.operations += 1;
          } catch (err) {
            await client.query('ROLLBACK').catch(() => undefined);
            const message = (err as Error).message;
            if (/frozen/.test(message)) {
              stats.frozenErrors.push(message);
              break;
            }
            if (!/duplicate key|deadlock/.test(message)) stats.otherErrors.push(message);
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
