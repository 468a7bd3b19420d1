/**
 * Which capture preflight chooses, and why: on the shared server (wal_level=replica) auto falls
 * back to triggers and an explicit capture: logical is refused (exit 2, nothing started); on a
 * private cluster with wal_level=logical auto chooses logical, and a table whose replica identity
 * lacks the key makes auto fall back and logical refuse, naming the ALTER TABLE that fixes it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { objectInventory, rowsAsText, TestDatabases } from '../helpers/databases';
import { serverSetting } from '../helpers/logical-cluster';
import { expectCleanRun } from '../helpers/repairs';
import { resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SCHEMA = `
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance int);
INSERT INTO public.accounts SELECT g, g FROM generate_series(1, 100) g;`;

describe('capture in preflight', () => {
  let shared: TestDatabases;
  const dir = mkdtempSync(join(tmpdir(), 'ferry-capmode-'));

  // The suite's databases on a private wal_level=logical cluster; a second pair on the shared server.
  const suite = stackSuite({
    name: 'capmode',
    logical: true,
    databases: { source: SCHEMA, target: '' },
    connections: { live: 'source', next: 'target' },
    seed: async () => {
      shared = await TestDatabases.create('capmode', ['source', 'target']);
      await shared.exec('source', SCHEMA);
    },
    connectionUrls: () => ({ shared: shared.url('source'), sharednext: shared.url('target') }),
    afterDrop: async () => {
      await shared?.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  });

  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };

  it('runs on a shared server with wal_level=replica and a private cluster with wal_level=logical', async () => {
    expect(await serverSetting(shared.url('source'), 'wal_level')).toBe('replica');
    expect(await serverSetting(suite.dbs.url('source'), 'wal_level')).toBe('logical');
  });

  it('falls back to triggers under auto where wal_level is replica, and says why', async () => {
    const run = await suite.stack.runCli(['validate', file('auto.yaml', 'source: shared\ntarget: sharednext\nmode: online\ntables: [public.accounts]\n'), '--connect']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('capture: trigger (capture: auto, and logical capture is not possible: wal_level is replica: set wal_level = logical');
  });

  it('refuses capture: logical where wal_level is replica with exit 2, naming the field and the fix, and starts nothing', async () => {
    const before = [await objectInventory(shared, 'source'), await objectInventory(shared, 'target')];
    const spec = file('logical.yaml', 'id: capmode-refused\nsource: shared\ntarget: sharednext\nmode: online\ncapture: logical\ntables: [public.accounts]\n');
    const run = await suite.stack.runCli(['start', spec]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('refused (LogicalCaptureUnavailable)');
    expect(run.stderr).toContain('capture: logical is not possible on this source: wal_level is replica: set wal_level = logical in postgresql.conf and restart the server');
    expect(run.stderr).toContain('or set capture: trigger');
    expect((await suite.stack.runCli(['status', 'capmode-refused'])).code).toBe(1);
    expect([await objectInventory(shared, 'source'), await objectInventory(shared, 'target')]).toEqual(before);
  });

  it('chooses logical under auto where the source allows it', async () => {
    const run = await suite.stack.runCli(['validate', file('auto-logical.yaml', 'source: live\ntarget: next\nmode: online\ntables: [public.accounts]\n'), '--connect']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('capture: logical (capture: auto, and the source allows logical decoding)');
    const trigger = await suite.stack.runCli(['validate', file('trigger.yaml', 'source: live\ntarget: next\nmode: online\ncapture: trigger\ntables: [public.accounts]\n'), '--connect']);
    expect(trigger.stdout).toContain('capture: trigger (capture: trigger in the spec)');
  });

  it('checks the replica identity: without the key, auto falls back and logical is refused with the ALTER TABLE to run', async () => {
    await suite.dbs.exec('source', 'CREATE TABLE public.nokey (id int PRIMARY KEY, v int); ALTER TABLE public.nokey REPLICA IDENTITY NOTHING;');
    try {
      const auto = await suite.stack.runCli(['validate', file('nokey-auto.yaml', 'source: live\ntarget: next\nmode: online\ntables: [public.nokey]\n'), '--connect']);
      expect(auto.code).toBe(0);
      expect(auto.stdout).toContain('capture: trigger (capture: auto, and logical capture is not possible: public.nokey has REPLICA IDENTITY NOTHING');
      const explicit = await suite.stack.runCli(['start', file('nokey.yaml', 'source: live\ntarget: next\nmode: online\ncapture: logical\ntables: [public.nokey]\n')]);
      expect(explicit.code).toBe(2);
      expect(explicit.stderr).toContain('ALTER TABLE public.nokey REPLICA IDENTITY DEFAULT (or FULL)');
    } finally {
      await suite.dbs.exec('source', 'DROP TABLE public.nokey');
    }
  });

  it('names USING INDEX for a table keyed by a unique index, and once its identity carries the key, moves it through the slot', async () => {
    await suite.dbs.exec(
      'source',
      `CREATE TABLE public.codes (code text NOT NULL UNIQUE, v int); INSERT INTO public.codes SELECT 'c' || g, g FROM generate_series(1, 500) g;`,
    );
    const spec = 'source: live\ntarget: next\nmode: online\ncapture: logical\ntables: [public.codes]\n';
    const refused = await suite.stack.runCli(['validate', file('codes.yaml', spec), '--connect']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('ALTER TABLE public.codes REPLICA IDENTITY USING INDEX codes_code_key (or FULL)');
    await suite.dbs.exec('source', 'ALTER TABLE public.codes REPLICA IDENTITY USING INDEX codes_code_key');
    const { ferry } = suite.stack;
    await ferry.start({ source: 'live', target: 'next', mode: 'online', capture: 'logical', tables: ['public.codes'], cutover: { approval: 'manual', approvalTimeout: '5m' } }, { id: 'capmode-codes' });
    await waitForPhase(ferry, 'capmode-codes', 'AWAITING_APPROVAL');
    expect(await suite.dbs.query('source', 'SELECT count(*)::int AS slots FROM pg_replication_slots')).toEqual([{ slots: 1 }]);
    // A key change, an update, a delete and an insert, each through the slot.
    await suite.dbs.exec('source', `UPDATE public.codes SET code = 'moved' WHERE code = 'c7'; UPDATE public.codes SET v = -v WHERE code = 'c8';
      DELETE FROM public.codes WHERE code = 'c9'; INSERT INTO public.codes VALUES ('new', 0)`);
    await ferry.approve('capmode-codes');
    const result = await resultWithin(ferry, 'capmode-codes', 90_000);
    expect(result.error).toBeNull();
    await expectCleanRun(ferry, result);
    expect(await rowsAsText(suite.dbs, 'target', 'public.codes', 'code')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.codes', 'code'));
    expect(await suite.dbs.query('target', `SELECT code, v FROM public.codes WHERE code IN ('moved', 'c8', 'c9', 'new') ORDER BY code`)).toEqual([
      { code: 'c8', v: -8 },
      { code: 'moved', v: 7 },
      { code: 'new', v: 0 },
    ]);
  });
});
