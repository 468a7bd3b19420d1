/**
 * The cutover of an online migration under real write load: pgbench plus a batch job whose
 * write transactions stay open for 10 s back to back. The freeze must not depend on winning a
 * lock race, the change log must not grow while the cutover waits for writers, the write
 * outage must stay within the longest writer transaction plus a few seconds, and whatever
 * blocks the cutover is named while it blocks and dealt with as `cutover.onBlocked` says.
 * Everything is checked against the databases.
 */
import { Client } from 'pg';
import { compareTable, ferryTriggers } from '../helpers/chaos';
import { objectInventory, rowsAsText, TestDatabases } from '../helpers/databases';
import { expectCleanRun } from '../helpers/repairs';
import { pgbenchSeed, startBatchJob, startPgbenchLoad } from '../helpers/pgbench';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

/** Rows waiting in every change log of every migration on a database. */
async function pendingChanges(dbs: TestDatabases, role: string): Promise<number> {
  const logs = await dbs.query<{ t: string }>(
    role,
    `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname LIKE '\\_ferry%' AND tablename LIKE 'log\\_%'`,
  );
  let n = 0;
  for (const { t } of logs) {
    // A log is dropped once its migration is done with it.
    const rows = await dbs.query<{ n: string }>(role, `SELECT count(*) AS n FROM ${t}`).catch(() => [{ n: '0' }]);
    n += Number(rows[0].n);
  }
  return n;
}

/** A session that opens a write transaction on `table` and keeps it open (idle in transaction). */
async function openWriter(url: string, sql: string, applicationName: string): Promise<{ client: Client; pid: number; lost: Promise<Error> }> {
  const client = new Client({ connectionString: url, application_name: applicationName });
  await client.connect();
  const lost = new Promise<Error>((resolve) => client.on('error', resolve));
  const [{ pid }] = (await client.query('SELECT pg_backend_pid() AS pid')).rows;
  await client.query('BEGIN');
  await client.query(sql);
  return { client, pid, lost };
}

const SMALL = `
CREATE TABLE public.teams (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO public.teams SELECT g, 'team ' || g FROM generate_series(1, 50) g;
CREATE TABLE public.users (id bigint PRIMARY KEY, email text NOT NULL UNIQUE, team_id int REFERENCES public.teams (id));
INSERT INTO public.users SELECT g, 'user' || g || '@example.com', 1 + g % 50 FROM generate_series(1, 20000) g;
ANALYZE;`;

describe('the cutover of an online migration', () => {
  describe('under pgbench and a batch job holding 10-second write transactions', () => {
    const suite = stackSuite({
      name: 'cutover_load',
      databases: { source: '', target: '' },
      connections: { app: 'source', next: 'target' },
      // pgbench's tables first, then the batch job's table and SMALL (whose ANALYZE covers all).
      seed: pgbenchSeed('source', 1, `CREATE TABLE public.batches (id bigserial PRIMARY KEY, note text, at timestamptz DEFAULT now()); ${SMALL}`),
    });

    it('completes without a lock race, keeps the log from growing while it waits, and bounds the outage by the longest writer', async () => {
      const HOLD_MS = 10_000;
      const tables = ['public.pgbench_accounts', 'public.pgbench_branches', 'public.pgbench_tellers', 'public.batches', 'public.teams', 'public.users'];
      const { id } = await suite.stack.ferry.start(
        { source: 'app', target: 'next', mode: 'online', tables, cutover: { approval: 'manual', approvalTimeout: '10m' } },
        { id: 'cutover-load' },
      );
      const load = startPgbenchLoad(suite.dbs.url('source'), 2);
      // Capture's CREATE TRIGGER needs a moment without an open write transaction on each table
      // (docs/limits.md): the batch job starts once capture is in place.
      await eventually(async () => (await suite.stack.ferry.status(id)).phase !== 'PENDING', 120_000);
      const batch = await startBatchJob(suite.dbs.url('source'), 'public.batches', HOLD_MS);
      // A second application that swaps two users' unique e-mails in one transaction: its keys
      // can reach the target in different sync batches.
      const swapper = new Client({ connectionString: suite.dbs.url('source') });
      await swapper.connect();
      let swapping = true;
      const swaps = (async () => {
        while (swapping) {
          const a = 1 + Math.floor(Math.random() * 20000);
          const b = 1 + ((a + 7919) % 20000);
          try {
            await swapper.query('BEGIN');
            const { rows } = await swapper.query('SELECT id, email FROM public.users WHERE id IN ($1, $2) ORDER BY id FOR UPDATE', [a, b]);
            if (rows.length === 2) {
              await swapper.query(`UPDATE public.users SET email = 'swap-' || id WHERE id = $1`, [rows[0].id]);
              await swapper.query('UPDATE public.users SET email = $2 WHERE id = $1', [rows[1].id, rows[0].email]);
              await swapper.query('UPDATE public.users SET email = $2 WHERE id = $1', [rows[0].id, rows[1].email]);
            }
            await swapper.query('COMMIT');
          } catch {
            await swapper.query('ROLLBACK').catch(() => undefined);
            break;
          }
        }
      })();
      let result;
      let maxBeforeApproval = 0;
      let maxDuringCutover = 0;
      try {
        await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 180_000);
        // The batch job has committed once (its transactions last 10 s; on an idle machine the
        // migration can reach approval sooner): its next one is the writer the cutover waits for.
        await eventually(async () => batch.committed > 0, 60_000, 200);
        // The steady backlog while the sync keeps up, then approval in the middle of a batch
        // transaction (the job is never between two of them for long).
        for (let i = 0; i < 10; i += 1) {
          maxBeforeApproval = Math.max(maxBeforeApproval, await pendingChanges(suite.dbs, 'source'));
          await new Promise((r) => setTimeout(r, 300));
        }
        await suite.stack.ferry.approve(id);
        const sampling = (async () => {
          for (;;) {
            const status = await suite.stack.ferry.status(id);
            if (status.endedAt) return;
            maxDuringCutover = Math.max(maxDuringCutover, await pendingChanges(suite.dbs, 'source'));
            await new Promise((r) => setTimeout(r, 250));
          }
        })();
        result = await resultWithin(suite.stack.ferry, id, 240_000);
        await sampling;
      } finally {
        swapping = false;
        await load.stop();
        await batch.stop();
        await swaps;
        await swapper.end();
      }
      expect(result.error).toBeNull();
      expect(result.state).toBe('SUCCEEDED');
      // The batch job was refused by the freeze, not by anything else.
      expect(batch.otherError).toBeUndefined();
      expect(batch.frozen).toContain('Ferry migration cutover-load');
      expect(batch.committed).toBeGreaterThan(0);
      // The log drained while the cutover waited for the open transaction: it never grew past
      // the steady backlog of the sync (plus the writes of one scheduling hiccup).
      expect(maxDuringCutover).toBeLessThanOrEqual(maxBeforeApproval + 2000);
      // The outage: from the first refused writer to the point of no return.
      expect(result.cutover!.writeOutageMs).toBeLessThanOrEqual(HOLD_MS + 8000);
      for (const table of tables) {
        const key = table.includes('accounts') ? 'aid' : table.includes('branches') ? 'bid' : table.includes('tellers') ? 'tid' : 'id';
        const comparison = await compareTable(suite.dbs, 'source', 'target', table, key);
        expect(comparison).toMatchObject({ equal: true, duplicateKeys: 0 });
      }
      // Unique e-mails and the foreign key exist on the target and hold.
      const constraints = await suite.dbs.query<{ c: string }>('target', `SELECT conname || ':' || contype::text || ':' || convalidated::text AS c FROM pg_constraint WHERE conrelid = 'public.users'::regclass ORDER BY 1`);
      expect(constraints.map((c) => c.c)).toEqual(['users_email_key:u:true', 'users_pkey:p:true', 'users_team_id_fkey:f:true']);
      // Nobody damaged it: validation had nothing to repair.
      await expectCleanRun(suite.stack.ferry, result);
    }, 420_000);
  });

  describe('blocked by a session that never ends its write transaction', () => {
    const suite = stackSuite({
      name: 'cutover_blocked',
      databases: { source: SMALL, target: '' },
      connections: { app: 'source', next: 'target' },
      // Fresh databases for each case, one Temporal server for all (each case has its own id).
      perTest: 'databases',
    });

    const spec = (cutover: Record<string, unknown>) => ({
      source: 'app',
      target: 'next',
      mode: 'online',
      tables: ['public.teams', 'public.users'],
      cutover: { approval: 'manual', approvalTimeout: '10m', ...cutover },
    });

    it('names the blocker while it blocks, then with onBlocked: terminate ends it and completes', async () => {
      const { id } = await suite.stack.ferry.start(spec({ maxWait: '8s', onBlocked: 'terminate' }), { id: 'cutover-terminate' });
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      const blocker = await openWriter(suite.dbs.url('source'), `UPDATE public.teams SET name = 'held' WHERE id = 7`, 'nightly-report');
      await suite.stack.ferry.approve(id);
      // Named at once, from the wait's own heartbeats: before its first slice has returned to the
      // workflow (which records CutoverBlocked then), not seconds later.
      const early = await eventually(async () => {
        const status = await suite.stack.ferry.status(id);
        return status.cutoverBlockers?.some((b) => b.pid === blocker.pid) ? status : undefined;
      }, 30_000, 100);
      expect(early.events.filter((e) => e.type === 'CutoverBlocked')).toEqual([]);
      // While it blocks, `ferry status` names it: pid, application, user, transaction age, query.
      const named = await eventually(async () => {
        const { stdout } = await suite.stack.runCli(['status', id]);
        return stdout.includes(String(blocker.pid)) && stdout.includes('nightly-report') ? stdout : undefined;
      }, 30_000);
      expect(named).toMatch(/UPDATE public\.teams SET name = 'held'/);
      const result = await resultWithin(suite.stack.ferry, id, 90_000);
      expect(result.state).toBe('SUCCEEDED');
      // The blocker's session was ended and its change never happened.
      expect((await blocker.lost).message).toMatch(/terminat/);
      const blocked = result.events.filter((e) => e.type === 'CutoverBlocked');
      expect(blocked.length).toBeGreaterThan(0);
      expect(blocked[0].detail).toMatchObject({
        blockers: [expect.objectContaining({ pid: blocker.pid, applicationName: 'nightly-report', user: 'postgres' })],
      });
      expect(blocked.some((e) => (e.detail as { terminated?: number[] }).terminated?.includes(blocker.pid))).toBe(true);
      expect(await rowsAsText(suite.dbs, 'target', 'public.teams', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.teams', 'id'));
      expect(await suite.dbs.query('source', `SELECT 1 FROM public.teams WHERE name = 'held'`)).toEqual([]);
    });

    it('with onBlocked: rollback leaves both sides exactly as they were', async () => {
      const before = {
        source: await objectInventory(suite.dbs, 'source'),
        target: await objectInventory(suite.dbs, 'target'),
        users: await rowsAsText(suite.dbs, 'source', 'public.users', 'id'),
      };
      const { id } = await suite.stack.ferry.start(spec({ maxWait: '3s', onBlocked: 'rollback' }), { id: 'cutover-rollback' });
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      const blocker = await openWriter(suite.dbs.url('source'), `UPDATE public.users SET email = 'held@example.com' WHERE id = 3`, 'long-batch');
      await suite.stack.ferry.approve(id);
      const result = await resultWithin(suite.stack.ferry, id, 90_000);
      expect(result.state).toBe('FAILED');
      expect(result.error?.type).toBe('CutoverBlocked');
      expect(result.error?.message).toContain(String(blocker.pid));
      // The blocker was left alone and can still finish its work; its lock kept the triggers
      // from being dropped at once, so they go in the background once it has ended.
      expect(result.warnings.join('\n')).toMatch(/removed in the background/);
      await blocker.client.query('ROLLBACK');
      await blocker.client.end();
      await eventually(async () => JSON.stringify(await objectInventory(suite.dbs, 'source')) === JSON.stringify(before.source), 60_000, 500);
      expect(await objectInventory(suite.dbs, 'source')).toEqual(before.source);
      expect(await objectInventory(suite.dbs, 'target')).toEqual(before.target);
      expect(await rowsAsText(suite.dbs, 'source', 'public.users', 'id')).toEqual(before.users);
      await suite.dbs.exec('source', `UPDATE public.users SET email = 'writable@example.com' WHERE id = 3`);
    });
  });

  describe('with a long reader on the source', () => {
    const suite = stackSuite({
      name: 'cutover_reader',
      databases: { source: SMALL, target: '' },
      connections: { app: 'source', next: 'target' },
    });

    it('still succeeds when capture cannot be removed at once, lifts the freeze, and removes capture once the reader ends', async () => {
      const { id } = await suite.stack.ferry.start(
        { source: 'app', target: 'next', mode: 'online', tables: ['public.teams', 'public.users'], cutover: { approval: 'manual', afterwards: 'unfreeze' } },
        { id: 'cutover-reader' },
      );
      await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
      // pg_dump-like: a transaction that has read the table and stays open.
      const reader = new Client({ connectionString: suite.dbs.url('source'), application_name: 'pg_dump' });
      await reader.connect();
      await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await reader.query('SELECT count(*) FROM public.users');
      let result;
      try {
        await suite.stack.ferry.approve(id);
        result = await resultWithin(suite.stack.ferry, id, 120_000);
        expect(result.state).toBe('SUCCEEDED');
        expect(result.warnings.join('\n')).toMatch(/capture .*removed in the background/);
        // Unfrozen at once, although the triggers are still there.
        await suite.dbs.exec('source', `UPDATE public.teams SET name = 'writable' WHERE id = 1`);
      } finally {
        await reader.query('COMMIT');
        await reader.end();
      }
      await eventually(async () => (await ferryTriggers(suite.dbs, 'source')).length === 0, 120_000, 1000);
      expect(await suite.dbs.query('source', `SELECT nspname FROM pg_namespace WHERE nspname LIKE '\\_ferry%'`)).toEqual([]);
      expect(await rowsAsText(suite.dbs, 'target', 'public.users', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.users', 'id'));
    });
  });
});
