/** Sequence positions carried from the source to the target at a migration's finish. */
import { ClientBase } from 'pg';
import { QualifiedName, quoteQualified } from '../core/identifiers';
import { SequenceInfo, TableInfo } from './catalog';

/** Sets each target sequence to the source's last_value (not max(column): that misses used-up values). */
export async function copySequencePositions(source: ClientBase, target: ClientBase, info: TableInfo, targetTable: QualifiedName): Promise<void> {
  for (const seq of info.sequences) {
    const position = await source.query(`SELECT last_value::text AS last_value, is_called FROM ${quoteQualified(seq.name)}`);
    const targetSeq = await targetSequenceFor(target, seq, targetTable);
    if (!targetSeq) continue;
    await target.query('SELECT pg_catalog.setval($1::regclass, $2::int8, $3)', [
      targetSeq,
      position.rows[0].last_value,
      position.rows[0].is_called,
    ]);
  }
}

/** A sequence no column owns (`objects: all`), under the same name on both sides, set to the source's position. */
export async function copySequencePosition(source: ClientBase, target: ClientBase, sequence: QualifiedName): Promise<void> {
  const position = await source.query(`SELECT last_value::text AS last_value, is_called FROM ${quoteQualified(sequence)}`);
  await target.query('SELECT pg_catalog.setval($1::regclass, $2::int8, $3)', [quoteQualified(sequence), position.rows[0].last_value, position.rows[0].is_called]);
}

/** The target column's own sequence (serial OWNED BY or identity), whatever its name. */
async function targetSequenceFor(target: ClientBase, seq: SequenceInfo, table: QualifiedName): Promise<string | null> {
  const { rows } = await target.query('SELECT pg_catalog.pg_get_serial_sequence($1, $2) AS seq', [quoteQualified(table), seq.column]);
  return rows[0].seq;
}
