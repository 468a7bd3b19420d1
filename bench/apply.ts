/**
 * `npm run bench:apply` — the online apply alone: one table's change-log backlog drained by the
 * sync activity with one lane and with more (`parallelism.apply`), side by side in one run.
 *
 * A table shaped like pgbench_accounts (--rows, default 1,000,000) is prepared as an online
 * migration would have it — preflight, target, trigger capture, the copy — by calling the
 * activities directly on real PostgreSQL (no Temporal server: the apply is what is measured).
 * Then, for every lane count in turn (--repeat rounds, interleaved so that the machine's drift
 * falls on all of them alike), --changes rows are updated on the source in one statement and the
 * backlog they leave in the change log is drained by syncChanges as a table's sync would
 * (rounds of 5,000 keys growing while quick). Prints keys applied per second for each lane
 * count, the median and the ratio to one lane, and checks the target equals the source at the
 * end (count and hash of every row on both sides). Figures, never assertions.
 *
 * Options: --rows N (1000000), --changes N (200000), --lanes 1,2,4, --repeat N (3), --batch N
 * (keys of a round to begin with, SYNC_BATCH_KEYS; small rounds are what a sync keeping up runs),
 * --pg URL (admin URL of the server to use), --keep (leave the databases).
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../activities';
import { copyTableOf, MigrationPlan } from '../src/core/plan';
import { parseSpec } from '../src/core/spec';
import { ConnectionRegistry } from '../src/db/connections';
import { databaseUrl, DEFAULT_TEST_PG, ensurePostgres, runSql } from '../src/dev/postgres';
import { silentLogger } from '../src/logger';
import { SYNC_BATCH_KEYS } from '../workflows/migration/table';
import { median } from './figures';

const args = process.argv.slice(2);
const arg = (name: string, fallback: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const ROWS = Number(arg('--rows', '1000000'));
const CHANGES = Number(arg('--changes', '200000'));
const LANES = arg('--lanes', '1,2,4').split(',').map(Number);
const REPEAT = Number(arg('--repeat', '3'));
const BATCH = Number(arg('--batch', String(SYNC_BATCH_KEYS)));
const ADMIN = arg('--pg', process.env.FERRY_TEST_PG ?? DEFAULT_TEST_PG);
const KEEP = args.includes('--keep');
const ID = 'bench-apply';

async function main(): Promise<void> {
  await ensurePostgres(ADMIN);
  const tag = Date.now().toString(36);
  const names = { src: `ferry_bench_apply_src_${tag}`, dst: `ferry_bench_apply_dst_${tag}` };
  for (const db of Object.values(names)) await runSql(ADMIN, `CREATE DATABASE ${db}`);
  const env = { FERRY_CONN_SRC: databaseUrl(ADMIN, names.src), FERRY_CONN_DST: databaseUrl(ADMIN, names.dst) };
  const connections = new ConnectionRegistry({ env });
  const activities = createActivities({ connections, logger: silentLogger(), env });
  const run = <T>(fn: () => Promise<T>): Promise<T> => new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') }).run(fn) as Promise<T>;
  try {
    process.stdout.write(`preparing ${ROWS.toLocaleString('en')} rows… `);
    await runSql(
      env.FERRY_CONN_SRC,
      `CREATE TABLE public.accounts (aid int PRIMARY KEY, bid int NOT NULL, abalance int NOT NULL, filler char(84));
       INSERT INTO public.accounts SELECT g, 1 + g / 100000, 0, '' FROM generate_series(1, ${ROWS}) g`,
    );
    await runSql(env.FERRY_CONN_SRC, 'VACUUM ANALYZE public.accounts');
    const spec = parseSpec({ id: ID, source: 'src', target: 'dst', mode: 'online', tables: ['public.accounts'], capture: 'trigger' });
    const plan: MigrationPlan = await run(() => activities.preflight({ migrationId: ID, spec }));
    await run(() => activities.prepareTarget({ migrationId: ID, source: 'src', target: 'dst', plan, truncate: false }));
    const table = plan.tables[0];
    await run(() => activities.installCapture({ migrationId: ID, source: 'src', tables: [{ index: table.index, source: table.source, keyColumns: table.keyColumns }], armFreeze: true }));
    for (const chunk of table.chunks) {
      await run(() => activities.copyChunk({ migrationId: ID, source: 'src', target: 'dst', table: copyTableOf(table), chunk: { ...chunk }, batchRows: 50_000, fence: Date.now(), sliceMs: 600_000 }));
    }
    process.stdout.write('done\n');

    const rates = new Map<number, number[]>(LANES.map((l) => [l, []]));
    let offset = 0;
    for (let round = 0; round < REPEAT; round += 1) {
      for (const lanes of LANES) {
        // The next CHANGES rows, so that each drain applies rows the last one did not touch.
        const from = (offset % ROWS) + 1;
        offset += CHANGES;
        await runSql(env.FERRY_CONN_SRC, `UPDATE public.accounts SET abalance = abalance + 1 WHERE aid BETWEEN ${from} AND ${from + CHANGES - 1}`);
        await runSql(env.FERRY_CONN_SRC, 'CHECKPOINT');
        const started = process.hrtime.bigint();
        let applied = 0;
        for (;;) {
          const r = await run(() =>
            activities.syncChanges({
              migrationId: ID,
              source: 'src',
              target: 'dst',
              table: copyTableOf(table),
              fence: Date.now(),
              sliceMs: 600_000,
              batchKeys: BATCH,
              recordDirty: true,
              returnWhenCaughtUp: true,
              lanes,
            }),
          );
          applied += r.applied;
          if (r.caughtUp && r.pending === 0) break;
        }
        const seconds = Number(process.hrtime.bigint() - started) / 1e9;
        rates.get(lanes)!.push(applied / seconds);
        process.stdout.write(`  round ${round + 1}, ${lanes} lane(s): ${applied.toLocaleString('en')} keys in ${seconds.toFixed(2)} s\n`);
      }
    }

    const same = async (url: string) =>
      (await runSql(url, `SELECT count(*)::text AS n, sum(hashtextextended(a::text, 0))::text AS h FROM public.accounts a`))[0];
    const [s, t] = await Promise.all([same(env.FERRY_CONN_SRC), same(env.FERRY_CONN_DST)]);
    const base = median(rates.get(LANES[0])!);
    process.stdout.write(`\nkeys applied per second, median of ${REPEAT} (${CHANGES.toLocaleString('en')} changed rows each, ${ROWS.toLocaleString('en')}-row table, rounds from ${BATCH.toLocaleString('en')} keys, dirty set recorded):\n`);
    process.stdout.write('| lanes | keys/s | against ' + `${LANES[0]} lane(s) |\n| --- | --- | --- |\n`);
    for (const lanes of LANES) {
      const m = median(rates.get(lanes)!);
      process.stdout.write(`| ${lanes} | ${Math.round(m).toLocaleString('en')} | ${(m / base).toFixed(2)}× |\n`);
    }
    process.stdout.write(`target equals source: ${s.n === t.n && s.h === t.h ? 'yes' : `NO (source ${s.n} rows, target ${t.n})`}\n`);
  } finally {
    await connections.close();
    if (!KEEP) for (const db of Object.values(names)) await runSql(ADMIN, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  }
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
