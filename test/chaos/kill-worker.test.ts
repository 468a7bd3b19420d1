/**
 * SIGKILL a `ferry worker` process in the middle of a chunk. The other worker takes the chunk
 * over after the heartbeat timeout, resumes from the committed checkpoint, and every row ends
 * up in the target exactly once — checked with SQL on both databases. The same for a table
 * without a key, copied by ranges of blocks: its duplicate rows stay exactly as many.
 */
import { ledgerSql, runningActivities } from '../helpers/chaos';
import { TestDatabases } from '../helpers/databases';
import { awaitRetry, Killed, lastAttempt } from '../helpers/kills';
import { eventually } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { expectCleanRun } from '../helpers/repairs';

const ROWS = 300_000;

async function fingerprint(dbs: TestDatabases, role: string, table = 'public.ledger'): Promise<{ n: number; digest: string }> {
  const [row] = await dbs.query<{ n: number; digest: string }>(
    role,
    `SELECT count(*)::int AS n, md5(string_agg(t::text, E'\\n' ORDER BY t::text)) AS digest FROM ${table} t`,
  );
  return row;
}

/** A copy of the ledger without any key or index, every tenth row in it twice. */
const KEYLESS = `CREATE TABLE public.ledger_raw AS SELECT * FROM public.ledger;
INSERT INTO public.ledger_raw SELECT * FROM public.ledger WHERE id % 10 = 0;
ANALYZE public.ledger_raw;`;

describe('a worker killed with SIGKILL mid-chunk', () => {
  const suite = stackSuite({
    name: 'kill',
    databases: { source: `${ledgerSql(ROWS)} ${KEYLESS}`, target: '' },
    connections: { old: 'source', new: 'target' },
    workers: 0,
  });

  it('loses and duplicates nothing: the other worker resumes from the checkpoint', async () => {
    const { id } = await suite.stack.ferry.start(
      { source: 'old', target: 'new', batchRows: 2000, parallelism: { tables: 1, chunks: 2 }, tables: [{ name: 'public.ledger', chunks: 2 }] },
      { id: 'kill-mid-chunk', skipPreflight: true },
    );
    await suite.stack.ferry.throttle(id, { rowsPerSecond: 20_000 });
    const workers = [await suite.stack.startWorkerProcessReady('w1'), await suite.stack.startWorkerProcessReady('w2')];

    // Wait until a chunk has committed batches in the target and is still copying, then kill
    // the worker that runs it (its checkpoint row names the activity that owns the chunk).
    const owner = await eventually(async () => {
      const owners = await suite.dbs
        .query<{ owner: string }>('target', `SELECT owner FROM _ferry.checkpoints WHERE rows_copied > 0 AND NOT done`)
        .catch(() => []);
      const running = await runningActivities(suite.stack.ferry, [`${id}/table-0`]);
      return running.find((a) => a.activity === 'copyChunk' && a.heartbeating && owners.some((o) => o.owner === `${a.activityId}#${a.attempt}`));
    }, 60_000);
    const victim = workers.find((w) => w.identity === owner.worker)!;
    victim.process.kill('SIGKILL');
    await victim.exited;
    expect(victim.process.signalCode).toBe('SIGKILL');
    const killed: Killed = { ...owner, at: Date.now() };

    // The throttle stays as it was: changing it now would end the interrupted slice and dispatch
    // a fresh one, and this test is about Temporal retrying the lost attempt elsewhere.
    const survivor = workers.find((w) => w !== victim)!;
    const result = await suite.stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');

    expect(await fingerprint(suite.dbs, 'target')).toEqual(await fingerprint(suite.dbs, 'source'));
    expect((await fingerprint(suite.dbs, 'target')).n).toBe(ROWS);
    // Checkpoints counted each committed row once, across the kill.
    expect(result.tables[0].rowsCopied).toBe(ROWS);
    // The interrupted slice ended in a heartbeat timeout and its next attempt ran on the survivor.
    expect(await awaitRetry(suite.stack.ferry, killed)).toEqual({ attempt: killed.attempt + 1, endedBy: 'heartbeat timeout' });
    expect(await lastAttempt(suite.stack.ferry, killed)).toEqual({ attempt: killed.attempt + 1, worker: survivor.identity, completed: true });
    await expectCleanRun(suite.stack.ferry, result);
  });

  it('loses and duplicates nothing of a table without a key: the chunk resumes at the next block', async () => {
    // The case above's survivor stops first: polling already, it started the copy before the
    // throttle reached it, and the whole table was copied before a chunk could be seen running
    // (CI and here, 2026-12-07).
    const before = suite.stack.processes.filter((w) => w.process.exitCode === null && w.process.signalCode === null);
    for (const w of before) w.process.kill('SIGTERM');
    await Promise.all(before.map((w) => w.exited));
    const { id } = await suite.stack.ferry.start(
      { source: 'old', target: 'new', batchRows: 2000, parallelism: { tables: 1, chunks: 2 }, tables: [{ name: 'public.ledger_raw', chunks: 2 }] },
      { id: 'kill-keyless', skipPreflight: true },
    );
    await suite.stack.ferry.throttle(id, { rowsPerSecond: 20_000 });
    // Two workers after the throttle: whichever runs the chunk is killed.
    await suite.stack.startWorkerProcessReady('w3');
    await suite.stack.startWorkerProcessReady('w4');
    const owner = await eventually(async () => {
      const owners = await suite.dbs
        .query<{ owner: string }>('target', `SELECT c.owner FROM _ferry.checkpoints c WHERE c.migration_id = $1 AND c.rows_copied > 0 AND NOT c.done`, [id])
        .catch(() => []);
      const running = await runningActivities(suite.stack.ferry, [`${id}/table-0`]);
      return running.find((a) => a.activity === 'copyChunk' && a.heartbeating && owners.some((o) => o.owner === `${a.activityId}#${a.attempt}`));
    }, 60_000);
    const victim = suite.stack.processes.find((w) => w.identity === owner.worker)!;
    victim.process.kill('SIGKILL');
    await victim.exited;
    const killed: Killed = { ...owner, at: Date.now() };
    const result = await suite.stack.ferry.result(id);
    expect(result.state).toBe('SUCCEEDED');
    const source = await fingerprint(suite.dbs, 'source', 'public.ledger_raw');
    expect(source.n).toBe(ROWS + ROWS / 10);
    expect(await fingerprint(suite.dbs, 'target', 'public.ledger_raw')).toEqual(source);
    expect(result.tables[0].rowsCopied).toBe(source.n);
    expect(await awaitRetry(suite.stack.ferry, killed)).toEqual({ attempt: killed.attempt + 1, endedBy: 'heartbeat timeout' });
    await expectCleanRun(suite.stack.ferry, result);
  });
});
