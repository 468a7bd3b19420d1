/**
 * The invariant that lets a chunk's copy write without deleting its batch's range first, so a
 * target can be loaded without any index: after every slice — finished, cancelled mid-batch, or
 * an older attempt shut out by the fence — the target holds no row past the chunk's committed
 * checkpoint, and at the end every source row exactly once. Then the primary key builds.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { copyTableOf, MigrationPlan } from '../../src/core/plan';
import { parseSpec } from '../../src/core/spec';
import { TestDatabases } from '../helpers/databases';

const ROWS = 20_000;

describe('a chunk copied without deleting its batches first', () => {
  let dbs: TestDatabases;
  let connections: ConnectionRegistry;
  let activities: ReturnType<typeof createActivities>;
  let plan: MigrationPlan;
  const env = () => new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') });
  const run = <T>(fn: () => Promise<T>): Promise<T> => env().run(fn) as Promise<T>;

  beforeAll(async () => {
    dbs = await TestDatabases.create('invariant', ['source', 'target']);
    await dbs.exec('source', `CREATE TABLE public.ledger (id bigint PRIMARY KEY, memo text);
      INSERT INTO public.ledger SELECT g, md5(g::text) FROM generate_series(1, ${ROWS}) g; ANALYZE;`);
    const urls = { FERRY_CONN_SRC: dbs.url('source'), FERRY_CONN_DST: dbs.url('target') };
    connections = new ConnectionRegistry({ env: urls });
    activities = createActivities({ connections, logger: silentLogger(), env: urls });
    const spec = parseSpec({ source: 'src', target: 'dst', tables: [{ name: 'public.ledger', chunks: 2 }] });
    plan = await run(() => activities.preflight({ migrationId: 'inv', spec }));
    await run(() => activities.prepareTarget({ migrationId: 'inv', source: 'src', target: 'dst', plan, truncate: false, primaryKeyAfterLoad: true }));
  });

  afterAll(async () => {
    await connections?.close();
    await dbs?.drop();
  });

  /** Target rows of chunk `index` past its committed checkpoint (must always be none). */
  async function rowsPastCheckpoint(index: number): Promise<number> {
    const chunk = plan.tables[0].chunks[index];
    const [{ n }] = await dbs.query<{ n: number }>(
      'target',
      `SELECT count(*)::int AS n FROM public.ledger t, _ferry.checkpoints c
        WHERE c.migration_id = 'inv' AND c.table_index = 0 AND c.chunk_index = $1
          AND (c.last_key IS NULL OR t.id > c.last_key[1]::bigint)
          AND ($2::bigint IS NULL OR t.id >= $2) AND ($3::bigint IS NULL OR t.id < $3)`,
      [index, chunk.lower?.[0] ?? null, chunk.upper?.[0] ?? null],
    );
    return n;
  }

  const slice = (index: number, fence: number, sliceMs = 1) =>
    activities.copyChunk({
      migrationId: 'inv',
      source: 'src',
      target: 'dst',
      table: copyTableOf(plan.tables[0]),
      chunk: plan.tables[0].chunks[index],
      batchRows: 1000,
      fence,
      sliceMs,
    });

  it('leaves nothing past the checkpoint after finished, cancelled and shut-out slices, and builds the key', async () => {
    expect(await dbs.query('target', `SELECT 1 FROM pg_constraint WHERE conrelid = 'public.ledger'::regclass AND contype = 'p'`)).toEqual([]);
    let fence = 1;
    for (const index of [0, 1]) {
      for (let round = 0; ; round += 1) {
        // Every third slice is cancelled while it copies (cancellation reaches it at a heartbeat).
        const mock = env();
        const call = mock.run(() => slice(index, (fence += 1), round % 3 === 2 ? 60_000 : 1)) as ReturnType<typeof slice>;
        if (round % 3 === 2) setImmediate(() => mock.cancel());
        const result = await call.catch(() => undefined);
        expect(await rowsPastCheckpoint(index)).toBe(0);
        // An attempt with an older fence (a zombie) is refused before it writes anything.
        await expect(run(() => slice(index, fence - 1))).rejects.toMatchObject({ type: 'Superseded' });
        expect(await rowsPastCheckpoint(index)).toBe(0);
        if (result?.checkpoint.done) break;
      }
    }
    const [{ n, distinct }] = await dbs.query<{ n: number; distinct: number }>('target', 'SELECT count(*)::int AS n, count(DISTINCT id)::int AS distinct FROM public.ledger');
    expect({ n, distinct }).toEqual({ n: ROWS, distinct: ROWS });
    expect(await run(() => activities.addPrimaryKey({ source: 'src', target: 'dst', table: plan.tables[0] }))).toEqual({ built: true });
    expect(await dbs.query('target', `SELECT conname FROM pg_constraint WHERE conrelid = 'public.ledger'::regclass AND contype = 'p'`)).toEqual([{ conname: 'ledger_pkey' }]);
  });
});
