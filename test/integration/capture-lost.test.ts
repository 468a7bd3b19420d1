/**
 * Capture removed behind Ferry's back during an online migration: a capture trigger dropped by
 * the table's owner, or disabled on one partition, means changes that were never logged. The
 * migration must fail with CaptureLost — never cut over — and roll back to exactly what was there.
 */
import { accounts } from '../fixtures/seeds';
import { objectInventory } from '../helpers/databases';
import { resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const EVENTS = `
CREATE TABLE public.events (id int, day date, v text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE public.events_2024 PARTITION OF public.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE public.events_2025 PARTITION OF public.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');`;

const SCHEMA = `
${accounts(5000)}
${EVENTS}
INSERT INTO public.events SELECT g, date '2024-01-01' + g % 700, 'e' || g FROM generate_series(1, 3000) g;
ANALYZE;`;

describe('an online migration whose capture is removed behind its back', () => {

  const suite = stackSuite({
    name: 'lost',
    // Ferry copies a partitioned table into a partitioned target prepared beforehand.
    databases: { source: SCHEMA, target: EVENTS },
    connections: { live: 'source', next: 'target' },
    perTest: 'databases',
  });

  const spec = (approvalTimeout: string) => ({
    source: 'live',
    target: 'next',
    mode: 'online',
    tables: ['public.accounts', 'public.events'],
    cutover: { approval: 'manual', approvalTimeout },
  });

  const captureTrigger = async (table: string) =>
    (await suite.dbs.query<{ tgname: string }>('source', `SELECT tgname FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE 'ferry\\_capture\\_%'`, [table]))[0]
      .tgname;

  const inventories = async () => ({ source: await objectInventory(suite.dbs, 'source'), target: await objectInventory(suite.dbs, 'target') });

  it('fails with CaptureLost when the capture trigger is dropped, even when the cutover is approved at once', async () => {
    const before = await inventories();
    const { id } = await suite.stack.ferry.start(spec('5m'), { id: 'lost-dropped' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    // DROP TRIGGER passes the DDL guard (it refuses ALTER and DROP of the table itself).
    await suite.dbs.exec('source', `DROP TRIGGER ${await captureTrigger('public.accounts')} ON public.accounts;
      UPDATE public.accounts SET note = 'never logged' WHERE id <= 10;`);
    await suite.stack.ferry.approve(id);
    const result = await resultWithin(suite.stack.ferry, id, 60_000);

    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('CaptureLost');
    expect(result.error?.message).toMatch(/public\.accounts/);
    expect(result.events).toEqual(expect.arrayContaining([expect.objectContaining({ type: 'CaptureLost', table: 'public.accounts' })]));
    expect(result.events.map((e) => e.type)).not.toContain('CutoverCompleted');
    expect(await inventories()).toEqual(before);
    expect(await suite.dbs.query('target', 'SELECT count(*)::int AS n FROM public.events')).toEqual([{ n: 0 }]);
    await suite.dbs.exec('source', `UPDATE public.accounts SET note = 'writable' WHERE id = 1`);
  });

  it('fails with CaptureLost when the capture trigger is disabled on one partition, without waiting for the approval', async () => {
    const before = await inventories();
    const { id } = await suite.stack.ferry.start(spec('10m'), { id: 'lost-disabled' });
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL');
    // The DDL guard refuses ALTER TABLE of a partition too, but it needs a superuser: without
    // one (here: the guard dropped), the table's owner can disable a trigger on a partition.
    await suite.dbs.exec('source', `DO $$ DECLARE t text; BEGIN FOR t IN SELECT evtname FROM pg_event_trigger LOOP EXECUTE format('DROP EVENT TRIGGER %I', t); END LOOP; END $$;
      ALTER TABLE public.events_2025 DISABLE TRIGGER ${await captureTrigger('public.events')};
      INSERT INTO public.events VALUES (100000, '2025-06-01', 'never logged');`);
    const result = await resultWithin(suite.stack.ferry, id, 60_000);

    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('CaptureLost');
    expect(result.error?.message).toMatch(/public\.events_2025 is disabled/);
    expect(result.events).toEqual(expect.arrayContaining([expect.objectContaining({ type: 'CaptureLost', table: 'public.events' })]));
    const status = await suite.stack.ferry.status(id);
    expect(status.error).toMatchObject({ type: 'CaptureLost' });
    expect(await inventories()).toEqual(before);
    expect(await suite.dbs.query('target', 'SELECT count(*)::int AS n FROM public.events')).toEqual([{ n: 0 }]);
  });
});
