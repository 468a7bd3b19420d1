/**
 * Writers for a range-partitioned table, as applications write to one: through the parent and
 * straight into its partitions, including updates that move a row to another partition.
 *
 * The table: public.events (id bigint, day int, amount int, note text, PRIMARY KEY (id, day))
 * partitioned by range of day — events_p0 [0, 100), events_p1 [100, 200), events_p2 [200, 300)
 * and events_default — seeded with ids 1..`rows`, day = id % 400.
 */
import { runWriters, Writers } from './writers';

export function eventsSchema(rows: number): string {
  return `
CREATE TABLE public.events (id bigint NOT NULL, day int NOT NULL, amount int NOT NULL DEFAULT 0, note text,
  PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE public.events_p0 PARTITION OF public.events FOR VALUES FROM (0) TO (100);
CREATE TABLE public.events_p1 PARTITION OF public.events FOR VALUES FROM (100) TO (200);
CREATE TABLE public.events_p2 PARTITION OF public.events FOR VALUES FROM (200) TO (300);
CREATE TABLE public.events_default PARTITION OF public.events DEFAULT;
CREATE INDEX events_note_idx ON public.events (note);
INSERT INTO public.events (id, day, amount, note) SELECT g, g % 400, g % 97, 'seed ' || g FROM generate_series(1, ${rows}) g;
ANALYZE public.events;`;
}

export function startPartitionWriters(url: string, count: number, rows: number): Promise<Writers> {
  return runWriters(url, count, ({ client, w, nextId, stats }) => {
    const id = () => 1 + Math.floor(Math.random() * rows);
    const day = (from: number, span: number) => from + Math.floor(Math.random() * span);
    return [
      { kind: 'insert via parent', run: () => client.query('INSERT INTO public.events (id, day, note) VALUES ($1, $2, $3)', [nextId(), day(0, 400), `new ${w}`]) },
      { kind: 'insert into partition', run: () => client.query('INSERT INTO public.events_p1 (id, day, note) VALUES ($1, $2, $3)', [nextId(), day(100, 100), `p1 ${w}`]) },
      { kind: 'insert into default', run: () => client.query('INSERT INTO public.events_default (id, day, note) VALUES ($1, $2, $3)', [nextId(), day(300, 500), `default ${w}`]) },
      { kind: 'update via parent', run: () => client.query('UPDATE public.events SET amount = amount + 1, note = $2 WHERE id = $1', [id(), `updated by ${w}`]) },
      { kind: 'update in partition', run: () => client.query('UPDATE public.events_p0 SET amount = amount - 1, note = $2 WHERE id = $1', [id(), `p0 by ${w}`]) },
      // Changes the partition key: the row leaves its partition for the next one (or the default).
      { kind: 'move between partitions', run: () => client.query('UPDATE public.events SET day = day + 100 WHERE id = $1', [id()]) },
      { kind: 'delete via parent', run: () => client.query('DELETE FROM public.events WHERE id = $1', [id()]) },
      { kind: 'delete from partition', run: () => client.query('DELETE FROM public.events_p2 WHERE id = $1', [id()]) },
      {
        kind: 'late commit in partition',
        run: async () => {
          await client.query('BEGIN');
          await client.query('UPDATE public.events_default SET note = $2 WHERE id = $1', [id(), `late ${w}`]);
          await new Promise((r) => setTimeout(r, 300 + Math.random() * 700));
          await client.query('COMMIT');
          stats.lateCommits += 1;
        },
      },
    ];
  });
}
