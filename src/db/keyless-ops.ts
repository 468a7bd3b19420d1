/**
 * Online moves of a table without a key (docs/architecture.md §6, "tables without a key"). No key
 * names a row, so the queue of keys that every other table uses cannot say which row changed.
 * Such a table moves with logical capture and REPLICA IDENTITY FULL instead: each change arrives
 * as whole rows, and the consumer writes it into the table's log as row images — the old row
 * taken away (delta −1), the new one added (+1) — at its transaction's commit position and its
 * place in it.
 *
 * A table without a key is a multiset of rows, and taking a row away or adding one commute: the
 * changes of any stretch of the log can be applied as their net effect per row image. What must
 * hold is exactly once, which the position gives:
 * - the copy reads the table in one snapshot taken at a known WAL position (snapshotAtPosition):
 *   the changes committed before it are in the copy, those committed at or after it are not;
 * - the apply takes the log's changes in position order from a watermark kept on the target (the
 *   table's sync checkpoint row: the last change applied), and moves the watermark in the same
 *   transaction as the rows; a change the consumer writes again after a restart is either still
 *   in the log once (its (lsn, seq) is unique) or behind the watermark.
 * - only changes of transactions the consumer has wholly written are applied: those committed
 *   before the position it confirmed.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ClientBase, escapeLiteral } from 'pg';
import { FAILURE } from '../core/failure-types';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified } from '../core/identifiers';
import type { CopyTable } from '../core/plan';
import { SLOTS_TABLE } from './logical-sql';
import { selectColumns } from './copy-stream';

/** One change to a table without a key: a row taken away (−1) or added (+1). */
export interface RowOp {
  /** The commit position of the change's transaction (pgoutput's begin: its final LSN). */
  lsn: string;
  /** Its place among its transaction's row changes. */
  seq: number;
  delta: 1 | -1;
  /** The row: each column pgoutput sent, as its text (null for NULL). */
  image: Record<string, string | null>;
}

/** The last change applied to the target: the ones after it (by lsn, then seq) are still to apply. */
export interface Watermark {
  lsn: string;
  seq: number;
}

/** Changes into a table's log, each once: a change already there (received again after a restart) is left as it is. */
export async function enqueueOps(db: ClientBase, log: string, ops: RowOp[]): Promise<void> {
  if (ops.length === 0) return;
  await db.query(
    `INSERT INTO ${log} (lsn, seq, delta, image)
     SELECT o.lsn::pg_lsn, o.seq, o.delta, o.image FROM jsonb_to_recordset($1::jsonb) AS o (lsn text, seq int, delta smallint, image jsonb)
     ON CONFLICT (lsn, seq) DO NOTHING`,
    [JSON.stringify(ops)],
  );
}

/**
 * Opens a REPEATABLE READ snapshot on `reader` at a known WAL position and returns the position:
 * every transaction that wrote `relation` and committed before it is visible in the snapshot,
 * none that commits at or after it is. `locker` holds SHARE on the table for a moment meanwhile —
 * it waits for the table's writers in flight (with the session's lock_timeout) and holds new ones
 * back — so no write to the table is half-way between its commit record and its visibility while
 * the snapshot is taken and the position read. The reader's transaction stays open for the caller.
 */
export async function snapshotAtPosition(locker: ClientBase, reader: ClientBase, relation: QualifiedName): Promise<string> {
  await locker.query('BEGIN');
  try {
    await locker.query(`LOCK TABLE ${quoteQualified(relation)} IN SHARE MODE`);
    await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const { rows } = await reader.query('SELECT pg_catalog.pg_current_wal_insert_lsn()::text AS lsn');
    return rows[0].lsn;
  } finally {
    await locker.query('ROLLBACK');
  }
}

/** The watermark as the table's sync checkpoint row keeps it (last_key: [lsn, seq]); null before the copy set one. */
export function watermarkOf(lastKey: string[] | null): Watermark | null {
  return lastKey && lastKey.length === 2 ? { lsn: lastKey[0], seq: Number(lastKey[1]) } : null;
}

/** The watermark a finished copy at `position` leaves: every change committed at or after it is still to apply. */
export function copiedAt(position: string): string[] {
  return [position, '-1'];
}

/** The changes of one round: in position order, after the watermark, of transactions wholly in the log, before `until`. */
export async function readOps(source: ClientBase, log: string, migrationId: string, after: Watermark, limit: number, until?: string): Promise<RowOp[]> {
  const { rows } = await source.query(
    `SELECT lsn::text, seq, delta, image FROM ${log}
      WHERE (lsn, seq) > ($1::pg_lsn, $2::int)
        AND lsn < (SELECT confirmed_lsn FROM ${SLOTS_TABLE} WHERE migration_id = $3)
        AND ($4::pg_lsn IS NULL OR lsn < $4::pg_lsn)
      ORDER BY lsn, seq LIMIT ${limit}`,
    [after.lsn, after.seq, migrationId, until ?? null],
  );
  // A full round ends with a whole transaction where it can: a transaction's rows applied in
  // parts could meet a unique index in a state the source never committed.
  if (rows.length < limit) return rows;
  const last = rows[rows.length - 1].lsn;
  const whole = rows.filter((r) => r.lsn !== last);
  return whole.length > 0 ? whole : rows;
}

/** Deletes the changes up to the watermark (applied, or in the copy already) from the log. */
export async function retireOps(source: ClientBase, log: string, upTo: Watermark): Promise<number> {
  const { rowCount } = await source.query(`DELETE FROM ${log} WHERE (lsn, seq) <= ($1::pg_lsn, $2::int)`, [upTo.lsn, upTo.seq]);
  return rowCount ?? 0;
}

/** Net effect per row image: how many copies of each row to add (> 0) or take away (< 0). */
export function netEffect(ops: Pick<RowOp, 'delta' | 'image'>[]): Map<string, number> {
  const net = new Map<string, number>();
  for (const op of ops) {
    const image = JSON.stringify(op.image);
    net.set(image, (net.get(image) ?? 0) + op.delta);
  }
  for (const [image, n] of net) if (n === 0) net.delete(image);
  return net;
}

/**
 * Applies a round's changes to the target, in the caller's transaction: their net effect per
 * row image — for each image taken away, that many target rows equal to it (column by column,
 * as text) deleted by their ctid; for each added, that many inserted. A row to take away that the
 * target does not have means the two sides differ: ConsistencyBreach, and nothing of the round
 * stays.
 */
export async function applyOps(target: ClientBase, table: CopyTable, ops: Pick<RowOp, 'delta' | 'image'>[]): Promise<void> {
  const net = netEffect(ops);
  if (net.size === 0) return;
  const stage: QualifiedName = { schema: 'pg_temp', name: `ferry_ops_${table.index}` };
  const relation = quoteQualified(table.target);
  await target.query(`LOCK TABLE ${relation} IN ROW EXCLUSIVE MODE`);
  await target.query(`CREATE TEMP TABLE IF NOT EXISTS ${quoteQualified(stage)} (n int NOT NULL, image jsonb NOT NULL) ON COMMIT DELETE ROWS`);
  await target.query(`INSERT INTO ${quoteQualified(stage)} (n, image) SELECT s.n, s.image FROM jsonb_to_recordset($1::jsonb) AS s (n int, image jsonb)`, [
    JSON.stringify([...net].map(([image, n]) => ({ n, image: JSON.parse(image) }))),
  ]);
  const wanted = [...net.values()].filter((n) => n < 0).reduce((sum, n) => sum - n, 0);
  if (wanted > 0) {
    const asText = (alias: string) => `ARRAY[${table.columns.map((c) => `${alias}.${quoteIdent(c)}::text`).join(', ')}]`;
    const imageText = `ARRAY[${table.columns.map((c) => `s.image->>${escapeLiteral(c)}`).join(', ')}]`;
    // A row is its partition and its ctid (a partitioned table's partitions each number their own).
    const { rowCount } = await target.query(
      `WITH doomed AS (
         SELECT m.rel, m.ctid FROM (
           SELECT t.tableoid AS rel, t.ctid, -s.n AS n, row_number() OVER (PARTITION BY s.image ORDER BY t.tableoid, t.ctid) AS rn
             FROM ${relation} AS t JOIN ${quoteQualified(stage)} AS s ON s.n < 0 AND ${asText('t')} = ${imageText}
         ) m WHERE m.rn <= m.n)
       DELETE FROM ${relation} WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) AND (tableoid, ctid) IN (SELECT rel, ctid FROM doomed)`,
    );
    if ((rowCount ?? 0) !== wanted) {
      throw ApplicationFailure.nonRetryable(
        `${displayQualified(table.source)}: a change takes away ${wanted} row(s) of which the target has only ${rowCount ?? 0}; source and target differ`,
        FAILURE.ConsistencyBreach,
      );
    }
  }
  // Each value from its text by its type's input function, as COPY reads it (the target's types).
  const types = await columnTypes(target, relation);
  await target.query(
    `INSERT INTO ${relation} (${selectColumns(table)}) OVERRIDING SYSTEM VALUE
     SELECT ${table.columns.map((c) => `(s.image->>${escapeLiteral(c)})::${types.get(c)}`).join(', ')}
       FROM ${quoteQualified(stage)} AS s CROSS JOIN generate_series(1, s.n) AS g
      WHERE s.n > 0`,
  );
}

/** Each column's type as SQL (qualified: Ferry's sessions have an empty search_path). */
async function columnTypes(db: ClientBase, relation: string): Promise<Map<string, string>> {
  const { rows } = await db.query(
    `SELECT a.attname AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`,
    [relation],
  );
  return new Map(rows.map((r) => [r.name as string, r.type as string]));
}
