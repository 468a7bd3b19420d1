/**
 * Streams one key range from source to target with COPY: `COPY (SELECT …) TO STDOUT` piped into
 * `COPY … FROM STDIN`, binary when every column's binary form is portable, text otherwise.
 * Rows never collect in memory; a metering stage counts bytes and lets the caller heartbeat.
 */
import { Transform, TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ClientBase } from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';
import { quoteIdent, quoteQualified } from '../core/identifiers';
import { CopyTable, Key } from '../core/plan';
import { blockPredicate, Bound, keyInList, keyPredicate, literalBinder, ParamBinder } from './ranges';


export interface CopyStats {
  rows: number;
  bytes: number;
}

/** Counts bytes and reports progress at most once a second (heartbeats are not free). */
class Meter extends Transform {
  bytes = 0;
  private reported = Date.now();
  constructor(private readonly onProgress: (bytes: number) => void) {
    super();
  }
  _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length;
    const now = Date.now();
    if (now - this.reported >= 1000) {
      this.reported = now;
      this.onProgress(this.bytes);
    }
    callback(null, chunk);
  }
}

export function selectColumns(table: CopyTable): string {
  return table.columns.map(quoteIdent).join(', ');
}

/** Streams the rows of a SELECT on the source into the target table with COPY. */
export async function copyStream(
  source: ClientBase,
  target: ClientBase,
  table: CopyTable,
  select: string,
  onProgress: (bytes: number) => void = () => undefined,
): Promise<CopyStats> {
  const format = table.copyFormat === 'binary' ? '(FORMAT binary)' : '';
  const out = source.query(copyTo(`COPY (${select}) TO STDOUT ${format}`));
  const into = target.query(copyFrom(`COPY ${quoteQualified(table.target)} (${selectColumns(table)}) FROM STDIN ${format}`));
  const meter = new Meter(onProgress);
  await pipeline(out, meter, into);
  return { rows: into.rowCount, bytes: meter.bytes };
}

/** Copies the rows of `bounds` into the target; the caller owns the target transaction. */
export async function copyRange(
  source: ClientBase,
  target: ClientBase,
  table: CopyTable,
  bounds: Bound[],
  onProgress?: (bytes: number) => void,
): Promise<CopyStats> {
  // COPY takes no parameters: key values enter as escaped, typed literals.
  const where = keyPredicate(table, bounds, literalBinder);
  return copyStream(source, target, table, `SELECT ${selectColumns(table)} FROM ${quoteQualified(table.source)} WHERE ${where}`, onProgress);
}

/** Copies the rows of source blocks [first, last) (last null: to the end) into the target; the caller owns the target transaction. */
export async function copyBlockRange(
  source: ClientBase,
  target: ClientBase,
  table: CopyTable,
  blocks: [number, number | null],
  onProgress?: (bytes: number) => void,
): Promise<CopyStats> {
  return copyStream(source, target, table, `SELECT ${selectColumns(table)} FROM ${quoteQualified(table.source)} WHERE ${blockPredicate(blocks[0], blocks[1])}`, onProgress);
}

/** Deletes the rows of `bounds` from the target (the batch's idempotent first step). */
export async function deleteRange(target: ClientBase, table: CopyTable, bounds: Bound[]): Promise<number> {
  const binder = new ParamBinder();
  const where = keyPredicate(table, bounds, binder);
  const result = await target.query(`DELETE FROM ${quoteQualified(table.target)} WHERE ${where}`, binder.params);
  return result.rowCount ?? 0;
}

/** Deletes the target's rows with these keys. */
export async function deleteKeys(target: ClientBase, table: CopyTable, keys: Key[]): Promise<number> {
  const binder = new ParamBinder();
  const result = await target.query(`DELETE FROM ${quoteQualified(table.target)} WHERE ${keyInList(table, keys, binder)}`, binder.params);
  return result.rowCount ?? 0;
}
