/** Sequence positions carried from the source to the target at a migration's finish. */
import { ClientBase } from 'pg';
import { QualifiedName, quoteQualified } from '../core/identifiers';

/** One sequence position to carry: the source's sequence, and the target's (its name, or the column that owns it). */
export type SequenceToCarry = { source: QualifiedName; target: QualifiedName } | { source: QualifiedName; table: QualifiedName; column: string };

/** Sequences read, looked up and set per statement in copySequencePositions. */
const SEQUENCES_AT_ONCE = 500;

/**
 * Sets each target sequence to the source's last_value (not max(column): that misses values used
 * and rolled back). A sequence is named on both sides (`objects: all`'s standalone ones), or found
 * on the target from the column that owns it (serial OWNED BY or identity), whatever its name there.
 * Three statements per SEQUENCES_AT_ONCE whatever their number:
 * the cutover's last step runs inside the write outage, where three round trips a sequence are
 * 1,500 at 500 tables with a serial key each. The source's positions are read together, the
 * target's sequences named together, and every one set in one statement. A column whose target
 * table has no sequence of its own is left alone.
 */
export async function copySequencePositions(source: ClientBase, target: ClientBase, sequences: SequenceToCarry[]): Promise<void> {
  for (let from = 0; from < sequences.length; from += SEQUENCES_AT_ONCE) {
    const part = sequences.slice(from, from + SEQUENCES_AT_ONCE);
    const reads = part.map((s, i) => `SELECT ${i} AS i, last_value::text AS last_value, is_called FROM ${quoteQualified(s.source)}`);
    const positions = new Map<number, { last_value: string; is_called: boolean }>();
    for (const row of (await source.query(reads.join('\nUNION ALL\n'))).rows) positions.set(Number(row.i), row);
    const owned = part.map((s, i) => ({ s, i })).filter((x): x is { s: Extract<SequenceToCarry, { column: string }>; i: number } => 'column' in x.s);
    // Each sequence's target, by its place in `part`: named, or found from its column below.
    const targets = new Map<number, string | null>();
    part.forEach((s, i) => 'target' in s && targets.set(i, quoteQualified(s.target)));
    if (owned.length > 0) {
      const { rows } = await target.query('SELECT x.i, pg_catalog.pg_get_serial_sequence(x.t, x.c) AS seq FROM unnest($1::int[], $2::text[], $3::text[]) AS x(i, t, c)', [
        owned.map((o) => o.i),
        owned.map((o) => quoteQualified(o.s.table)),
        owned.map((o) => o.s.column),
      ]);
      for (const row of rows) targets.set(Number(row.i), row.seq);
    }
    const set = [...targets].filter((entry): entry is [number, string] => entry[1] !== null);
    await target.query('SELECT pg_catalog.setval(x.s::regclass, x.v::int8, x.c) FROM unnest($1::text[], $2::text[], $3::bool[]) AS x(s, v, c)', [
      set.map(([, seq]) => seq),
      set.map(([i]) => positions.get(i)!.last_value),
      set.map(([i]) => positions.get(i)!.is_called),
    ]);
  }
}
