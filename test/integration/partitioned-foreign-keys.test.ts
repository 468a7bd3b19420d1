/**
 * A foreign key from a partitioned table. PostgreSQL before 18 cannot add one NOT VALID (Ferry's
 * way of adding a key without a long lock), so the target gets it on each partition NOT VALID,
 * each validated, and then on the parent, which adopts the partitions' validated keys without a
 * scan. Full and online mode: the run succeeds with nothing repaired, and the target's foreign
 * keys read as the source's — on the parent and, inherited, on every partition, all validated.
 */
import { TestDatabases } from '../helpers/databases';
import { expectCleanRun } from '../helpers/repairs';
import { resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SOURCE = `
  CREATE TABLE public.accounts (id int PRIMARY KEY, name text);
  INSERT INTO public.accounts SELECT g, 'account ' || g FROM generate_series(1, 500) g;
  CREATE TABLE public.invoices (id bigint, account_id int NOT NULL REFERENCES public.accounts (id) ON DELETE CASCADE, issued date NOT NULL, PRIMARY KEY (id, issued))
    PARTITION BY RANGE (issued);
  CREATE TABLE public.invoices_2025 PARTITION OF public.invoices FOR VALUES FROM ('2025-01-01') TO ('2026-01-01') PARTITION BY RANGE (issued);
  CREATE TABLE public.invoices_2025_h1 PARTITION OF public.invoices_2025 FOR VALUES FROM ('2025-01-01') TO ('2025-07-01');
  CREATE TABLE public.invoices_2025_h2 PARTITION OF public.invoices_2025 FOR VALUES FROM ('2025-07-01') TO ('2026-01-01');
  CREATE TABLE public.invoices_2026 PARTITION OF public.invoices FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
  INSERT INTO public.invoices SELECT g, 1 + g % 500, date '2025-03-01' + (g % 600) FROM generate_series(1, 20000) g;
  ANALYZE;`;

/** Every foreign key of the database: table, name, definition, validated, inherited or its own. */
async function foreignKeys(dbs: TestDatabases, role: string) {
  return dbs.query(
    role,
    `SELECT conrelid::regclass::text AS table, conname AS name, pg_get_constraintdef(oid) AS definition, convalidated AS validated, conislocal AS own
       FROM pg_constraint WHERE contype = 'f' ORDER BY 1, 2`,
  );
}

describe('foreign keys of a partitioned table', () => {
  const suite = stackSuite({
    name: 'partfk',
    databases: { source: SOURCE, target: '', online_src: SOURCE, online_dst: '' },
    connections: { src: 'source', dst: 'target', online_src: 'online_src', online_dst: 'online_dst' },
  });

  it('are added on every partition, validated, then on the parent, in full and in online mode', async () => {
    const { ferry } = suite.stack;
    const expected = await foreignKeys(suite.dbs, 'source');
    expect(expected).toHaveLength(5); // the parent's, and each partition's (sub-partitioned too)
    for (const [source, target, mode] of [['src', 'dst', 'full'], ['online_src', 'online_dst', 'online']] as const) {
      await ferry.start({ source, target, mode, tables: ['public.accounts', 'public.invoices'] }, { id: `partfk-${mode}` });
      const result = await resultWithin(ferry, `partfk-${mode}`, 180_000);
      expect({ mode, error: result.error }).toEqual({ mode, error: null });
      await expectCleanRun(ferry, result);
      expect({ mode, foreignKeys: await foreignKeys(suite.dbs, mode === 'full' ? 'target' : 'online_dst') }).toEqual({ mode, foreignKeys: expected });
    }
  }, 400_000);
});
