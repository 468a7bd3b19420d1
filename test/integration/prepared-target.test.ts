/**
 * Preflight against a target the user prepared, with triggers and foreign keys of its own,
 * called directly on real PostgreSQL as a superuser and as a limited role: the plan says what
 * each one does on Ferry's writes, and an online migration whose sync would set them off is
 * refused with the fix.
 */
import { randomBytes } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment as SdkMockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { MigrationPlan } from '../../src/core/plan';
import { parseSpec } from '../../src/core/spec';
import { adminUrl, TestDatabases, withClient, withCredentials } from '../helpers/databases';

class MockActivityEnvironment extends SdkMockActivityEnvironment {
  constructor() {
    super(undefined, { logger: new DefaultLogger('ERROR') });
  }
}

const TABLES = `
CREATE TABLE public.parents (id int PRIMARY KEY, name text);
CREATE TABLE public.children (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES public.parents (id) ON DELETE CASCADE);`;

describe('preflight of a prepared target with triggers and foreign keys', () => {
  let dbs: TestDatabases;
  let connections: ConnectionRegistry;
  let activities: ReturnType<typeof createActivities>;
  const role = `ferry_target_${randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    dbs = await TestDatabases.create('prepared', ['source', 'target']);
    await dbs.exec('source', `${TABLES}
      INSERT INTO public.parents SELECT g, 'p' || g FROM generate_series(1, 10) g;
      INSERT INTO public.children SELECT g, 1 + g % 10 FROM generate_series(1, 50) g;`);
    await dbs.exec('target', `${TABLES}
      CREATE TABLE public.audit (at timestamptz DEFAULT now(), what text);
      CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.audit (what) VALUES (TG_OP); RETURN NULL; END $$;
      CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.parents FOR EACH ROW EXECUTE FUNCTION public.audit();`);
    // A role that may read the target but not write as a replica (no superuser, no SET privilege).
    await withClient(adminUrl(), (c) => c.query(`CREATE ROLE ${role} LOGIN`));
    await dbs.exec('target', `GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${role}`);
    const env = { FERRY_CONN_SRC: dbs.url('source'), FERRY_CONN_DST: dbs.url('target'), FERRY_CONN_LIMITED: withCredentials(dbs.url('target'), role) };
    connections = new ConnectionRegistry({ env });
    activities = createActivities({ connections, logger: silentLogger(), env });
  });

  afterAll(async () => {
    await connections?.close();
    await dbs?.drop();
    await withClient(adminUrl(), async (c) => {
      await c.query(`REVOKE SET ON PARAMETER session_replication_role FROM ${role}`);
      await c.query(`DROP ROLE IF EXISTS ${role}`);
    });
  });

  const preflight = (target: string, mode: 'online' | 'full') =>
    new MockActivityEnvironment().run(activities.preflight, {
      migrationId: 'prepared',
      spec: parseSpec({ source: 'src', target, mode, tables: ['public.parents', 'public.children'] }),
    }) as Promise<MigrationPlan>;
  const refusal = async (target: string) => (await preflight(target, 'online').catch((e: unknown) => e)) as ApplicationFailure;

  it('lists the triggers and foreign keys, both ways, and that they stay quiet on Ferry\'s writes', async () => {
    const plan = await preflight('dst', 'online');
    expect(plan.targetReplicaRole).toBe(true);
    expect(plan.tables.map((t) => t.notes)).toEqual([
      [
        "trigger audit on public.parents does not fire on Ferry's writes (they run as a replica)",
        "foreign key children_parent_id_fkey of public.children (→ public.parents) is neither checked nor acted on for Ferry's writes (they run as a replica)",
      ],
      ["foreign key children_parent_id_fkey of public.children (→ public.parents) is neither checked nor acted on for Ferry's writes (they run as a replica)"],
    ]);
  });

  it('refuses an online migration whose role cannot write as a replica, naming the table, what fires and the fix', async () => {
    const err = await refusal('limited');
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect({ type: err.type, nonRetryable: err.nonRetryable }).toEqual({ type: 'TargetTriggersFire', nonRetryable: true });
    expect(err.message).toContain('tables[0]: target table public.parents has trigger audit on public.parents, foreign key children_parent_id_fkey (public.children → public.parents)');
    expect(err.message).toContain(`GRANT SET ON PARAMETER session_replication_role TO ${role}`);
    expect(err.message).toContain('superuser');
    // Full mode is not refused; the plan says what will fire.
    const full = await preflight('limited', 'full');
    expect(full.targetReplicaRole).toBe(false);
    expect(full.tables[0].notes).toEqual([
      "trigger audit on public.parents fires on Ferry's writes (Ferry cannot write as a replica)",
      "foreign key children_parent_id_fkey of public.children (→ public.parents) is checked and its actions fire on Ferry's writes (Ferry cannot write as a replica)",
    ]);
  });

  it('accepts the same role once it may set session_replication_role', async () => {
    await withClient(adminUrl(), (c) => c.query(`GRANT SET ON PARAMETER session_replication_role TO ${role}`));
    const plan = await preflight('limited', 'online');
    expect(plan.targetReplicaRole).toBe(true);
    expect(plan.tables[0].notes?.[0]).toBe("trigger audit on public.parents does not fire on Ferry's writes (they run as a replica)");
  });

  it('refuses a trigger set ENABLE ALWAYS online even when Ferry writes as a replica', async () => {
    await dbs.exec('target', 'ALTER TABLE public.parents ENABLE ALWAYS TRIGGER audit');
    try {
      const err = await refusal('dst');
      expect(err.type).toBe('TargetTriggersFire');
      expect(err.message).toMatch(/target table public\.parents has trigger audit on public\.parents, which would fire on the online sync's delete-and-reinsert/);
      expect(err.message).toContain('ENABLE TRIGGER');
    } finally {
      await dbs.exec('target', 'ALTER TABLE public.parents ENABLE TRIGGER audit');
    }
  });
});
