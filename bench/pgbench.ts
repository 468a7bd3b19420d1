/**
 * What the online benches share: pgbench's TPC-B-like load measured in transactions per second,
 * and the change-log rows a migration left on its source.
 */
import { ProcessResult, runProcess } from './process';
import { runSql } from '../src/dev/postgres';
import { findOnPath } from '../src/dev/temporal-binary';

export const PGBENCH = findOnPath('pgbench') ?? '/usr/lib/postgresql/15/bin/pgbench';

/** Runs a command to its end; its stdout and stderr together. */
export function output(command: string, argv: string[]): Promise<ProcessResult> {
  return runProcess(command, argv);
}

/**
 * pgbench's TPCB-like script for `seconds` against `url`; returns transactions per second. Each
 * measurement starts from vacuumed branches and tellers, as pgbench's own runs do (its `-n` here
 * only spares pgbench_history, whose TRUNCATE capture refuses): their few rows take thousands of
 * updates a second, and without it each run inherits the last one's dead rows — back-to-back runs
 * on this machine went 2,333, 2,018, 1,325 TPS, then 2,166 after the vacuum — which made every
 * phase measured after the baseline look slower than it was.
 */
export async function pgbenchTps(url: string, clients: number, seconds: number): Promise<number> {
  await runSql(url, 'VACUUM pgbench_branches, pgbench_tellers');
  const { out } = await output(PGBENCH, ['-n', '-c', String(clients), '-j', '2', '-T', String(seconds), url]);
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out)?.[1];
  if (!tps) throw new Error(`pgbench printed no TPS:\n${out}`);
  return Number(tps);
}

/** The change logs on a migration's source. */
export async function logTables(url: string): Promise<{ t: string }[]> {
  return (await runSql(url, `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = '_ferry_capture' AND tablename LIKE 'log\\_%'`)) as { t: string }[];
}

/** Rows waiting in the change logs on the source (each a changed key, not yet applied). */
export async function logRows(url: string): Promise<number> {
  let n = 0;
  for (const { t } of await logTables(url)) n += Number((await runSql(url, `SELECT count(*)::int8 AS n FROM ${t}`))[0].n);
  return n;
}
