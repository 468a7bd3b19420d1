/**
 * Spec options that change what a migration does to the databases, each checked there with SQL:
 * `validation: none` (copied, never compared), `truncate: true` (a non-empty target table's rows
 * replaced; emptied by a rollback, as docs/limits.md says) and `deadline` (TIMED_OUT, then
 * rolled back).
 */
import { objectInventory, rowsAsText } from '../helpers/databases';
import { activityStarts } from '../helpers/history';
import { ActivityHold } from '../helpers/interceptors';
import { resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

describe('spec options on real databases', () => {
  const hold = new ActivityHold();

  const suite = stackSuite({
    name: 'options',
    databases: {
      source: `CREATE TABLE public.plain (id int PRIMARY KEY, v text);
       INSERT INTO public.plain SELECT g, 'v' || g FROM generate_series(1, 3000) g;
       CREATE TABLE public.refill (id int PRIMARY KEY, v text);
       INSERT INTO public.refill SELECT g, 'source ' || g FROM generate_series(1, 500) g;
       CREATE TABLE public.kept (id int PRIMARY KEY, v text);
       INSERT INTO public.kept SELECT g, 'source ' || g FROM generate_series(1, 300) g;
       CREATE TABLE public.broken (id int PRIMARY KEY, v int);
       INSERT INTO public.broken SELECT g, g FROM generate_series(1, 100) g;
       INSERT INTO public.broken VALUES (101, -1);
       ALTER TABLE public.broken ADD CONSTRAINT v_positive CHECK (v > 0) NOT VALID;
       CREATE TABLE public.late (id int PRIMARY KEY, v text);
       INSERT INTO public.late SELECT g, 'v' || g FROM generate_series(1, 2000) g;
       ANALYZE;`,
      // Target tables with rows of their own: stale versions of source rows, and rows the source lacks.
      target: `CREATE TABLE public.refill (id int PRIMARY KEY, v text);
       INSERT INTO public.refill VALUES (1, 'stale'), (250, 'stale'), (9001, 'not in the source'), (9002, 'not in the source');
       CREATE TABLE public.kept (id int PRIMARY KEY, v text);
       INSERT INTO public.kept VALUES (1, 'old'), (7777, 'old');`,
    },
    connections: { src: 'source', dst: 'target' },
    workers: 0,
    ready: async ({ stack }) => {
      await stack.startWorker({ interceptors: hold.interceptors() });
    },
  });

  it('validation: none copies without comparing: no validation activity runs, the migration never enters VALIDATING, the rows are the source\'s', async () => {
    // Several batches per chunk (1,500 rows, 400 per batch): nothing would repair a batch the copy lost.
    const { id } = await suite.stack.ferry.start(
      { source: 'src', target: 'dst', validation: 'none', batchRows: 400, tables: [{ name: 'public.plain', chunks: 2 }] },
      { id: 'no-validation' },
    );
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('SUCCEEDED');
    expect(await rowsAsText(suite.dbs, 'target', 'public.plain', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.plain', 'id'));
    const activities = new Set((await activityStarts(suite.stack.client, `${id}/table-0`)).map((s) => s.activityType));
    expect([...activities].sort()).toEqual(['addPrimaryKey', 'analyzeTable', 'copyChunk', 'listIndexes']);
    expect(result.events.map((e) => e.type)).not.toContain('ValidationPassed');
    const status = await suite.stack.ferry.status(id);
    expect(status.transitions.filter((t) => t.machine === 'phase').map((t) => t.to)).not.toContain('VALIDATING');
    await suite.dbs.exec('target', 'DROP TABLE public.plain');
  });

  it('truncate: true replaces the rows of a target table that already had some', async () => {
    const refused = await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.refill'] }, { id: 'refill-refused' }).catch((e: Error) => e);
    expect(refused).toMatchObject({ type: 'TargetNotEmpty' });
    const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', truncate: true, tables: ['public.refill'] }, { id: 'refill' });
    expect((await resultWithin(suite.stack.ferry, id)).state).toBe('SUCCEEDED');
    // Exactly the source's rows: the stale versions replaced, the rows the source lacks gone.
    expect(await rowsAsText(suite.dbs, 'target', 'public.refill', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.refill', 'id'));
  });

  it('leaves a target table that existed before empty when a truncate: true migration rolls back, and drops what it created', async () => {
    const before = await objectInventory(suite.dbs, 'target');
    const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', truncate: true, tables: ['public.kept', 'public.broken'] }, { id: 'refill-rolled-back' });
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('PostgresError.23514');
    expect(await objectInventory(suite.dbs, 'target')).toEqual(before); // broken dropped, kept still there
    expect(await suite.dbs.query('target', 'SELECT count(*)::int AS n FROM public.kept')).toEqual([{ n: 0 }]);
  });

  it('deadline: ends TIMED_OUT when the deadline passes mid-copy, and rolls the target back', async () => {
    const before = await objectInventory(suite.dbs, 'target');
    const held = hold.arm('copyChunk'); // the copy sits in its first slice until the deadline cancels it
    try {
      const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', deadline: '3s', tables: ['public.late'] }, { id: 'deadline' });
      expect((await held).workflowId).toBe(`${id}/table-0`);
      const result = await resultWithin(suite.stack.ferry, id);
      expect(result.state).toBe('TIMED_OUT');
      expect(result.error).toMatchObject({ type: 'DeadlineExceeded', message: 'deadline reached before the migration finished' });
      expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['RollbackStarted', 'RolledBack']));
      expect(Date.parse(result.end_time) - Date.parse(result.start_time)).toBeGreaterThanOrEqual(3000);
      expect(await objectInventory(suite.dbs, 'target')).toEqual(before);
      expect((await suite.stack.client.workflow.getHandle(id).describe()).status.name).toBe('FAILED');
    } finally {
      hold.disarm('copyChunk');
    }
  });
});
