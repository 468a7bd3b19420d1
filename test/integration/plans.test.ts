/**
 * Plans are data, not SQL. A plan reaches the workers from outside Ferry's own preflight — as
 * the workflow's argument from any Temporal client, or from `_ferry.migrations.plan` when a
 * migration is retried — and must not be able to run SQL of its author's choosing: key types
 * come from the catalog, and a plan of the wrong shape is refused.
 */
import { MockActivityEnvironment as SdkMockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { WorkflowFailedError } from '@temporalio/client';
import { createActivities } from '../../activities';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { MigrationPlan } from '../../src/core/plan';
import { rowsAsText } from '../helpers/databases';
import { stackSuite } from '../helpers/suite';

/** A key type that, pasted into `COPY (SELECT … '1'::<type>) TO STDOUT`, runs a statement of its own. */
const INJECTED_TYPE = `bigint) TO STDOUT; CREATE TABLE public.pwned (x int); COPY (SELECT 1`;

describe('a plan handed to the workers', () => {
  const suite = stackSuite({
    name: 'plans',
    databases: {
      source: `CREATE TABLE public.ledger (id bigint PRIMARY KEY, memo text);
      INSERT INTO public.ledger SELECT g, 'm' || g FROM generate_series(1, 3000) g; ANALYZE;`,
      target: '',
    },
    connections: { src: 'source', dst: 'target' },
  });

  const pwned = async () =>
    [...(await suite.dbs.query('source', `SELECT to_regclass('public.pwned') AS t`)), ...(await suite.dbs.query('target', `SELECT to_regclass('public.pwned') AS t`))].filter(
      (r) => r.t !== null,
    );

  it('cannot smuggle SQL through a key column type: the type is read from the catalog', async () => {
    const spec = { source: 'src', target: 'dst', batchRows: 500, tables: [{ name: 'public.ledger', chunks: 3 }] };
    const plan = await suite.stack.ferry.preflight(spec, 'plans-injected');
    const doctored: MigrationPlan = { ...plan, tables: plan.tables.map((t) => ({ ...t, keyColumns: t.keyColumns.map((k) => ({ ...k, type: INJECTED_TYPE })) })) };
    const handle = await suite.stack.client.workflow.start('migrationWorkflow', {
      taskQueue: suite.stack.taskQueue,
      workflowId: 'plans-injected',
      args: [{ ...spec, id: 'plans-injected' }, { plan: doctored }],
    });
    const result = await handle.result();
    expect(result.state).toBe('SUCCEEDED');
    expect(await pwned()).toEqual([]);
    expect(await rowsAsText(suite.dbs, 'target', 'public.ledger', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.ledger', 'id'));
  });

  it('refuses a plan of the wrong shape before anything runs', async () => {
    const spec = { source: 'src', target: 'dst', tables: [{ name: 'public.ledger', target: 'shape.ledger' }] };
    const plan = await suite.stack.ferry.preflight(spec, 'plans-shape');
    const doctored = { ...plan, tables: plan.tables.map((t) => ({ ...t, columns: ['id', 'memo) FROM public.ledger; DROP TABLE public.ledger; --'], extra: 1 })) };
    const handle = await suite.stack.client.workflow.start('migrationWorkflow', {
      taskQueue: suite.stack.taskQueue,
      workflowId: 'plans-shape',
      args: [{ ...spec, id: 'plans-shape' }, { plan: doctored }],
    });
    const err = await handle.result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkflowFailedError);
    const status = await suite.stack.ferry.status('plans-shape');
    expect(status.error).toMatchObject({ type: 'InvalidPlan' });
    expect(status.error?.message).toMatch(/plan\.tables\.0/);
    expect(await suite.dbs.query('target', `SELECT to_regclass('shape.ledger') AS t`)).toEqual([{ t: null }]);
    expect(await rowsAsText(suite.dbs, 'source', 'public.ledger', 'id')).toHaveLength(3000);
  });

  it('refuses to resume from a stored plan that was tampered with', async () => {
    const env = { FERRY_CONN_SRC: suite.dbs.url('source'), FERRY_CONN_DST: suite.dbs.url('target') };
    const connections = new ConnectionRegistry({ env });
    const activities = createActivities({ connections, logger: silentLogger(), env });
    const run = <T>(fn: () => Promise<T>): Promise<T> => new SdkMockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') }).run(fn) as Promise<T>;
    try {
      const plan = await suite.stack.ferry.preflight({ source: 'src', target: 'dst', tables: [{ name: 'public.ledger', target: 'stored.ledger' }] }, 'plans-stored');
      await run(() => activities.prepareTarget({ migrationId: 'plans-stored', source: 'src', target: 'dst', plan, truncate: false }));
      expect(await run(() => activities.storedPlan({ migrationId: 'plans-stored', target: 'dst' }))).toEqual(plan);
      await suite.dbs.exec('target', `UPDATE _ferry.migrations SET plan = jsonb_set(plan, '{tables,0,chunks}', '"everything"') WHERE id = 'plans-stored'`);
      await expect(run(() => activities.storedPlan({ migrationId: 'plans-stored', target: 'dst' }))).rejects.toMatchObject({ type: 'InvalidPlan' });
      await run(() => activities.dropTargetObjects({ migrationId: 'plans-stored', target: 'dst' }));
    } finally {
      await connections.close();
    }
  });
});
