/**
 * `npm run record-histories [-- SCENARIO… | --force]`: records the workflow histories that
 * test/replay/replay.test.ts replays against the current workflow code (issue 7, determinism).
 *
 * Per scenario: throwaway source and target databases, a dev server of its own with one
 * in-process Ferry worker (test/helpers, as the integration tests), one migration driven the
 * way an operator would, then the full history of every execution in the namespace — the
 * migrationWorkflow, each run of its tableMigrationWorkflow children (continued-as-new runs
 * separately), the preflight and unfreeze helpers — written as JSON to
 * test/fixtures/histories/<scenario>/<workflowType>-<n>.json with a manifest.json naming each
 * file's workflow id and run id (histories do not carry the workflow id; replay needs it).
 *
 * Without arguments it records only scenarios that have no fixtures yet: old histories are the
 * point (they stand for workflows still running in production), so a workflow change that
 * breaks their replay is guarded with patched(), not re-recorded. --force re-records the named
 * scenarios (or all).
 */
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { temporal } from '@temporalio/proto';
import { Client as PgClient } from 'pg';
import { DEFAULT_TEST_PG, ensurePostgres } from '../src/dev/postgres';
import type { ResultDocument } from '../src/core/status';
import { ensureTemporalBinary, temporalVersion } from '../src/dev/temporal-binary';
import { rowsAsText, TestDatabases } from '../test/helpers/databases';
import { startLogicalCluster } from '../test/helpers/logical-cluster';
import { PgBouncer, startPgBouncer } from '../src/dev/pgbouncer';
import { NatsServer, startNatsServer } from '../src/dev/nats';
import { jetstream } from '@nats-io/jetstream';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { sign } from '../src/signature';
import { readyTaskQueue, workflowIds } from '../src/core/names';
import { activityPayloads, activityQueues } from '../test/helpers/history';
import { Receiver } from '../test/helpers/receiver';
import { eventually, resultWithin, TestStack, waitForPhase } from '../test/helpers/stack';

type History = temporal.api.history.v1.IHistory;

const FIXTURES_DIR = join(__dirname, '..', 'test', 'fixtures', 'histories');

interface Context {
  id: string;
  stack: TestStack;
  dbs: TestDatabases;
  receiver: Receiver;
  /** With Scenario.pooler: PgBouncer in front of the source (pooled database `app`), its admin console the connection `pooladmin`. */
  pooler?: PgBouncer;
  /** With Scenario.nats: the NATS JetStream server the workers publish events to (FERRY_NATS_URL). */
  nats?: NatsServer;
}

interface Scenario {
  name: string;
  description: string;
  schema: string;
  /** The migration's (or change plan's) final state; anything else and nothing is written. */
  expected: ResultDocument['state'];
  /** Source and target on a private cluster with wal_level=logical (logical capture). */
  logical?: boolean;
  /** A real PgBouncer in front of the source (cutover.switch: pgbouncer). */
  pooler?: boolean;
  /** A real `nats-server -js`: the workers publish events (and read approvals) there. */
  nats?: boolean;
  /** The worker's activity slots (absent: the default). */
  slots?: number;
  run(ctx: Context): Promise<Pick<ResultDocument, 'state' | 'error'>>;
}

const FULL_SCHEMA = `
CREATE TABLE public.customers (id int PRIMARY KEY, name text NOT NULL, email text UNIQUE);
INSERT INTO public.customers SELECT g, 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 300) g;
CREATE TABLE public.orders (id bigint PRIMARY KEY, customer_id int NOT NULL REFERENCES public.customers (id), total numeric(10,2) CHECK (total >= 0));
INSERT INTO public.orders SELECT g, 1 + g % 300, g / 4.0 FROM generate_series(1, 500) g;
CREATE INDEX orders_customer ON public.orders (customer_id);
ANALYZE;`;

/** FULL_SCHEMA's tables with their keys, compared after a full-load scenario. */
const FULL_TABLES: [string, string][] = [
  ['public.customers', 'id'],
  ['public.orders', 'id'],
];

const ONLINE_SCHEMA = `
CREATE TABLE public.accounts (id bigint PRIMARY KEY, balance numeric(12,2), note text);
INSERT INTO public.accounts SELECT g, g / 10.0, 'seed ' || g FROM generate_series(1, 400) g;
CREATE TABLE public.items (a int, b text, v int NOT NULL, PRIMARY KEY (a, b));
INSERT INTO public.items SELECT g % 20, 'k' || g, 0 FROM generate_series(1, 200) g;
ANALYZE;`;

/** A few writes of every kind while the tables sync: insert, update, delete, key change. */
const ONLINE_WRITES = `
UPDATE public.accounts SET balance = balance + 1 WHERE id <= 5;
INSERT INTO public.accounts VALUES (1001, 10.5, 'written during sync');
DELETE FROM public.accounts WHERE id = 7;
UPDATE public.accounts SET id = 2001 WHERE id = 8;
UPDATE public.items SET v = v + 1 WHERE a = 3;`;

const onlineSpec = (extra: Record<string, unknown>) => ({
  source: 'src',
  target: 'dst',
  mode: 'online',
  batchRows: 100,
  tables: [{ name: 'public.accounts', chunks: 2 }, 'public.items'],
  ...extra,
});

/** The key the recorded workers verify approval messages with (FERRY_SECRET_APPROVE). */
const APPROVAL_KEY = 'recorded-approval-key';

/** An approval message signed with APPROVAL_KEY, as a pipeline publishes it. */
async function publishApproval(nats: NatsServer, id: string, body: string): Promise<void> {
  const nc = await connect({ servers: nats.url });
  try {
    const h = headers();
    h.set('X-Ferry-Signature', sign(APPROVAL_KEY, Math.floor(Date.now() / 1000), body));
    await jetstream(nc).publish(`ferry.control.${id}.approve`, body, { headers: h });
  } finally {
    await nc.close();
  }
}

/** Waits until the sync has carried ONLINE_WRITES to the target (before the cutover drain). */
async function writesSynced(dbs: TestDatabases): Promise<void> {
  await eventually(async () => {
    const rows = await dbs.query<{ n: number }>('target', 'SELECT count(*)::int AS n FROM public.accounts WHERE id IN (1001, 2001)');
    return rows[0].n === 2;
  }, 60_000);
}

async function sameRows(dbs: TestDatabases, tables: [string, string][]): Promise<void> {
  for (const [table, key] of tables) {
    const [source, target] = await Promise.all([rowsAsText(dbs, 'source', table, key), rowsAsText(dbs, 'target', table, key)]);
    if (JSON.stringify(source) !== JSON.stringify(target)) throw new Error(`${table}: the target differs from the source after the migration`);
  }
}

/** ONLINE_SCHEMA's tables with their keys, compared after an online scenario. */
const ONLINE_TABLES: [string, string][] = [
  ['public.accounts', 'id'],
  ['public.items', 'a, b'],
];

/**
 * A full load run to its end: start the spec, act on the migration while it copies, take its
 * result, and check that every table of FULL_SCHEMA arrived row for row.
 */
function fullLoad(spec: (ctx: Context) => Record<string, unknown>, during?: (ctx: Context) => Promise<void>): Scenario['run'] {
  return async (ctx) => {
    await ctx.stack.ferry.start(spec(ctx), { id: ctx.id });
    await during?.(ctx);
    const result = await resultWithin(ctx.stack.ferry, ctx.id);
    await sameRows(ctx.dbs, FULL_TABLES);
    return result;
  };
}

/**
 * An online migration up to its approval, with ONLINE_WRITES made on the source and synced to
 * the target; `afterWrites` waits for whatever else should happen in between.
 */
async function syncedAtApproval(ctx: Context, spec: Record<string, unknown>, startOptions: { tableHistoryLimit?: number } = {}, afterWrites?: () => Promise<unknown>): Promise<void> {
  await ctx.stack.ferry.start(spec, { id: ctx.id, ...startOptions });
  await waitForPhase(ctx.stack.ferry, ctx.id, 'AWAITING_APPROVAL');
  await ctx.dbs.exec('source', ONLINE_WRITES);
  await afterWrites?.();
  await writesSynced(ctx.dbs);
}

interface ChangeRun {
  /** The plan's own fields: kind, id and database (`src`) are filled in. */
  plan: Record<string, unknown>;
  /** Result callback with event webhooks to the receiver. */
  callback?: boolean;
  startOptions?: { historyLimit?: number };
  /** What the operator does while the plan runs. */
  during?: (ctx: Context) => Promise<void>;
  /** What the operator does once the plan ended (the scenario's result is still the plan's). */
  after?: (ctx: Context) => Promise<void>;
}

/** A change plan run to its end: start it, act on it while it runs, take its result, act after it. */
function changePlan({ plan, callback, startOptions, during, after }: ChangeRun): Scenario['run'] {
  return async (ctx) => {
    const callbackField = callback ? { callback: { url: `${ctx.receiver.url}/change`, events: true } } : {};
    await ctx.stack.ferry.startChange({ kind: 'change', id: ctx.id, database: 'src', ...plan, ...callbackField }, startOptions);
    await during?.(ctx);
    const result = await ctx.stack.ferry.changeResult(ctx.id);
    await after?.(ctx);
    return result;
  };
}

/** ONLINE_SCHEMA plus a unique column, a foreign key and a plain index: built before the cutover. */
const ONLINE_SCHEMA_WITH_CONSTRAINTS = `${ONLINE_SCHEMA}
CREATE TABLE public.teams (id int PRIMARY KEY, name text NOT NULL UNIQUE);
INSERT INTO public.teams SELECT g, 'team ' || g FROM generate_series(1, 20) g;
CREATE TABLE public.members (id int PRIMARY KEY, team_id int NOT NULL REFERENCES public.teams (id), email text NOT NULL UNIQUE);
INSERT INTO public.members SELECT g, 1 + g % 20, 'm' || g || '@example.com' FROM generate_series(1, 300) g;
CREATE INDEX members_team ON public.members (team_id);
ANALYZE;`;

interface Application {
  /** The i-th write: a statement and its parameters. */
  write(i: number): [string, unknown[]];
  everyMs: number;
  /** Whether to approve now, given the writes that succeeded so far. */
  approveWhen(written: number): Promise<boolean>;
}

/** Synced at the approval, an application writing; approved while it writes (the freeze ends its writes: read_only_sql_transaction). */
async function approvedWhileApplicationWrites(ctx: Context, application: Application): Promise<ResultDocument> {
  const { id, stack, dbs } = ctx;
  await syncedAtApproval(ctx, onlineSpec({ cutover: { approval: 'manual', approvalTimeout: '10m', afterwards: 'unfreeze' } }));
  const app = new PgClient({ connectionString: dbs.url('source'), application_name: 'recording-app' });
  await app.connect();
  let refused = false;
  let written = 0;
  const writes = (async () => {
    for (let i = 0; !refused; i += 1) {
      await app.query(...application.write(i)).then(
        () => (written += 1),
        () => (refused = true),
      );
      await new Promise((r) => setTimeout(r, application.everyMs));
    }
  })();
  try {
    await eventually(() => application.approveWhen(written), 120_000);
    await stack.ferry.approve(id);
    const result = await resultWithin(stack.ferry, id);
    refused = true;
    await writes;
    if (result.state === 'SUCCEEDED') await sameRows(dbs, ONLINE_TABLES);
    return result;
  } finally {
    refused = true;
    await writes;
    await app.end();
  }
}

/** An application updating a row every 100 ms: some seconds of its writes reach the target while the tables dwell, then the approval. */
const approvedWhileWriting = (ctx: Context) =>
  approvedWhileApplicationWrites(ctx, {
    write: (i) => ['UPDATE public.accounts SET balance = balance + 1 WHERE id = $1', [1 + (i % 400)]],
    everyMs: 100,
    approveWhen: async (written) => written >= 40,
  });

/**
 * An application writing to both tables every 50 ms, on a worker of one activity slot: a ready
 * table's slice that waited for the slot behind the other's dwell finds it crowded
 * (PATCHES.crowdedSync) and the table pauses off the slot. Approved once a table's history
 * holds such a result, or it is not the scenario it says.
 */
const approvedWhileCrowded = (ctx: Context) =>
  approvedWhileApplicationWrites(ctx, {
    write: (i) => [i % 2 === 0 ? 'UPDATE public.accounts SET balance = balance + 1 WHERE id = $1' : 'UPDATE public.items SET v = v + 1 WHERE a = $1 % 20', [1 + (i % 400)]],
    everyMs: 50,
    approveWhen: async () => (await crowdedSlices(ctx.stack, ctx.id)) > 0,
  });

/** Sync slices of the migration's two tables that came back `crowded`, read from their histories. */
async function crowdedSlices(stack: TestStack, id: string): Promise<number> {
  let crowded = 0;
  for (const index of [0, 1]) {
    const { results } = await activityPayloads(stack.client, workflowIds.table(id, index));
    crowded += (results.syncChanges ?? []).filter((r) => r?.crowded === true).length;
  }
  return crowded;
}

/** Online with manual approval (and `cutover`'s other settings): synced at the approval, approved, rows compared; `ferry unfreeze` after, when asked. */
async function approvedOnline(ctx: Context, { unfreeze, cutover = {} }: { unfreeze: boolean; cutover?: Record<string, unknown> }): Promise<ResultDocument> {
  const { id, stack, dbs } = ctx;
  await syncedAtApproval(ctx, onlineSpec({ cutover: { approval: 'manual', approvalTimeout: '10m', ...cutover } }));
  await stack.ferry.approve(id);
  const result = await resultWithin(stack.ferry, id);
  if (result.state === 'SUCCEEDED') {
    if (unfreeze) await stack.ferry.unfreeze(id);
    await sameRows(dbs, ONLINE_TABLES);
  }
  return result;
}

const SCENARIOS: Scenario[] = [
  {
    name: 'full',
    description: 'full load of two tables (one in two chunks), checksum validation, result callback with event webhooks',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(({ receiver }) => ({
      source: 'src',
      target: 'dst',
      batchRows: 100,
      validation: 'checksum',
      tables: ['public.customers', { name: 'public.orders', chunks: 2 }],
      callback: { url: `${receiver.url}/full`, events: true },
      metadata: { recordedBy: 'scripts/record-histories.ts' },
    })),
  },
  {
    name: 'online',
    description: 'online, manual approval, writes during sync, approve; keep-frozen, then `ferry unfreeze` (the unfreeze helper)',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    run: (ctx) => approvedOnline(ctx, { unfreeze: true }),
  },
  {
    name: 'online-switch-pgbouncer',
    description:
      'online, manual approval, cutover.switch: pgbouncer (a real PgBouncer in front of the source; the switch activities on the main queue, whose worker serves them too): paused, repointed at the target, resumed',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    pooler: true,
    run(ctx) {
      const pgbouncer = { admin: 'pooladmin', database: 'app', configFile: ctx.pooler!.databasesFile, taskQueue: ctx.stack.taskQueue };
      return approvedOnline(ctx, { unfreeze: false, cutover: { switch: { pgbouncer } } });
    },
  },
  {
    name: 'online-switch-webhook-refused',
    description: 'online, auto approval, cutover.switch: webhook answering 500 at switched: rolled back after the drain, the switcher told `reverted`',
    schema: ONLINE_SCHEMA,
    expected: 'FAILED',
    async run(ctx) {
      const { id, stack, receiver } = ctx;
      receiver.answer('/switch', 200, 500);
      await stack.ferry.start(onlineSpec({ cutover: { switch: { webhook: { url: `${receiver.url}/switch`, secret: 'FERRY_SECRET_SWITCH', timeout: '10s' } } } }), { id });
      return resultWithin(stack.ferry, id);
    },
  },
  {
    name: 'online-event-stream',
    description:
      'online with the event stream (FERRY_NATS_URL): approval: event by a signed message, then NATS stopped, so the run ends with events unpublished and hands them to eventPublisherWorkflow, which publishes them once NATS is back',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    nats: true,
    async run(ctx) {
      const { id, stack, dbs, nats } = ctx;
      await stack.ferry.start(onlineSpec({ cutover: { approval: 'event', approvalSecret: 'FERRY_SECRET_APPROVE', approvalTimeout: '10m' } }), { id });
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
      await publishApproval(nats!, id, JSON.stringify({ actor: 'pipeline', reason: 'recorded' }));
      await eventually(async () => (await stack.ferry.status(id)).transitions.some((t) => t.machine === 'control' && t.signal === 'approve' && t.to === 'approved'), 60_000);
      await nats!.stop();
      const result = await resultWithin(stack.ferry, id);
      await nats!.start();
      await eventually(async () => (await stack.client.workflow.getHandle(workflowIds.events(id)).describe()).status.name === 'COMPLETED', 120_000);
      if (result.state === 'SUCCEEDED') await sameRows(dbs, ONLINE_TABLES);
      return result;
    },
  },
  {
    name: 'online-paused',
    description: 'online, manual approval: paused and resumed back to back five times while the tables wait (numbered control, patch sequenced-control), writes synced after the resume, approve',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    async run(ctx) {
      const { id, stack, dbs } = ctx;
      await stack.ferry.start(onlineSpec({ cutover: { approval: 'manual', approvalTimeout: '10m' } }), { id });
      await waitForPhase(stack.ferry, id, 'AWAITING_APPROVAL');
      for (let i = 0; i < 5; i += 1) {
        await stack.ferry.pause(id);
        await stack.ferry.resume(id);
      }
      await dbs.exec('source', ONLINE_WRITES);
      await writesSynced(dbs);
      await stack.ferry.approve(id);
      const result = await resultWithin(stack.ferry, id);
      if (result.state === 'SUCCEEDED') await sameRows(dbs, ONLINE_TABLES);
      return result;
    },
  },
  {
    name: 'online-logical',
    description: 'online with capture: logical on a private wal_level=logical cluster: the slot consumer beside the tables, writes during sync, manual approval, the cutover waiting for the consumer before the drain, afterwards: unfreeze',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    logical: true,
    async run(ctx) {
      const { id, stack, dbs } = ctx;
      await syncedAtApproval(ctx, onlineSpec({ capture: 'logical', cutover: { approval: 'manual', approvalTimeout: '10m', afterwards: 'unfreeze' } }));
      await stack.ferry.approve(id);
      const result = await resultWithin(stack.ferry, id);
      if (result.state === 'SUCCEEDED') await sameRows(dbs, ONLINE_TABLES);
      return result;
    },
  },
  {
    name: 'online-logical-stop-after',
    description: 'online with capture: logical after patch consumer-stop-outside-outage: the consumer is stopped after the drain and its acknowledgement awaited past the point of no return, writes during sync, manual approval, keep-frozen',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    logical: true,
    async run(ctx) {
      const { id, stack, dbs } = ctx;
      await syncedAtApproval(ctx, onlineSpec({ capture: 'logical', cutover: { approval: 'manual', approvalTimeout: '10m' } }));
      await stack.ferry.approve(id);
      const result = await resultWithin(stack.ferry, id);
      if (result.state === 'SUCCEEDED') await sameRows(dbs, ONLINE_TABLES);
      return result;
    },
  },
  {
    name: 'cancelled',
    description: 'full load throttled, paused and resumed, then the cancel signal during the copy; compensation and the callback',
    schema: `
CREATE TABLE public.orders (id bigint PRIMARY KEY, customer int NOT NULL, total numeric(10,2));
INSERT INTO public.orders SELECT g, g % 97, g / 3.0 FROM generate_series(1, 2000) g;
CREATE TABLE public.notes (id int PRIMARY KEY, body text);
INSERT INTO public.notes SELECT g, 'note ' || g FROM generate_series(1, 200) g;
ANALYZE;`,
    expected: 'CANCELLED',
    async run({ id, stack, dbs, receiver }) {
      const spec = {
        source: 'src',
        target: 'dst',
        batchRows: 100,
        tables: [{ name: 'public.orders', chunks: 2 }, 'public.notes'],
        callback: { url: `${receiver.url}/cancelled` },
      };
      await stack.ferry.start(spec, { id });
      await stack.ferry.throttle(id, { rowsPerSecond: 200 });
      const copied = async () => (await dbs.query<{ n: number }>('target', 'SELECT count(*)::int AS n FROM public.orders').catch(() => [{ n: 0 }]))[0].n;
      await eventually(async () => (await copied()) > 0, 60_000);
      await stack.ferry.pause(id);
      await eventually(async () => (await stack.ferry.status(id)).paused);
      await stack.ferry.resume(id);
      await eventually(async () => !(await stack.ferry.status(id)).paused);
      await stack.ferry.cancel(id, 'recording: cancelled during the copy');
      return resultWithin(stack.ferry, id);
    },
  },
  {
    name: 'throttled',
    description: 'full load of two tables under one rate cap; the cap is re-shared when the smaller table finishes copying (patch share-rate-cap-across-tables)',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(
      () => ({
        source: 'src',
        target: 'dst',
        batchRows: 100,
        parallelism: { tables: 2, chunks: 2 },
        tables: ['public.customers', { name: 'public.orders', chunks: 2 }],
      }),
      async ({ id, stack }) => {
        await stack.ferry.throttle(id, { rowsPerSecond: 300 });
      },
    ),
  },
  {
    name: 'rolled-back',
    description: 'full load where a row violates a CHECK added NOT VALID on the source: the copy fails for good, the saga drops the target tables',
    schema: `
CREATE TABLE public.accounts (id int PRIMARY KEY, owner text NOT NULL);
INSERT INTO public.accounts SELECT g, 'owner ' || g FROM generate_series(1, 300) g;
CREATE TABLE public.strict (id int PRIMARY KEY, v int);
INSERT INTO public.strict SELECT g, g FROM generate_series(1, 200) g;
INSERT INTO public.strict VALUES (201, -1);
ALTER TABLE public.strict ADD CONSTRAINT v_positive CHECK (v > 0) NOT VALID;
ANALYZE;`,
    expected: 'FAILED',
    async run({ id, stack }) {
      await stack.ferry.start({ source: 'src', target: 'dst', batchRows: 100, tables: ['public.accounts', 'public.strict'] }, { id });
      const result = await resultWithin(stack.ferry, id);
      if (!result.events.some((e) => e.type === 'RolledBack')) throw new Error('rolled-back: the migration failed without compensating');
      return result;
    },
  },
  {
    name: 'continued-as-new',
    description: 'online with tableHistoryLimit 40: table workflows continue as new during sync; approve; cutover.afterwards unfreeze',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    async run(ctx) {
      const { id, stack, dbs } = ctx;
      const spec = onlineSpec({ cutover: { approval: 'manual', approvalTimeout: '10m', afterwards: 'unfreeze' } });
      await syncedAtApproval(ctx, spec, { tableHistoryLimit: 40 }, () =>
        eventually(async () => {
          for await (const w of stack.client.workflow.list({ query: `WorkflowId = '${id}/table-0'` })) {
            if (w.status.name === 'CONTINUED_AS_NEW') return true;
          }
          return false;
        }, 90_000),
      );
      await stack.ferry.approve(id);
      const result = await resultWithin(stack.ferry, id);
      await sameRows(dbs, ONLINE_TABLES);
      return result;
    },
  },
  {
    name: 'full-indexes-per-table',
    description: 'full load; each table builds its indexes once validated, then foreign keys are added NOT VALID and validated (patch target-ready-before-cutover)',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', batchRows: 100, tables: ['public.customers', { name: 'public.orders', chunks: 2 }] })),
  },
  {
    name: 'full-batched-reports',
    description: 'full load after patches batched-reports and parent-marks-copying: milestones that fall together in one signal (last chunk + FULL_DONE + TableCopied; IndexesBuilt + COMPLETED), source indexes listed beside the primary key build, FULL_MIGRATING marked by the parent, checksum validation',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', batchRows: 100, validation: 'checksum', tables: ['public.customers', { name: 'public.orders', chunks: 2 }] })),
  },
  {
    name: 'full-small-tables',
    description: 'full load after patch small-table-in-one-step: two small tables in one chunk each, whose primary key, indexes (a unique constraint, an index) and ANALYZE their copy activity does once the chunk is done; checksum validation',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', batchRows: 100, validation: 'checksum', tables: ['public.customers', 'public.orders'] })),
  },
  {
    name: 'full-batches-by-bytes',
    description: 'full load of a spec without batchRows after patch batches-by-bytes: the tables get no batchRows and their copies size batches by bytes; checksum validation',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', validation: 'checksum', tables: ['public.customers', { name: 'public.orders', chunks: 2 }] })),
  },
  {
    name: 'full-validated-whole',
    description: 'full load after patch whole-table-validation: a table of two chunks compared whole, one statement per side (checksum), before its chunks would be; a small table beside it',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', validation: 'checksum', tables: ['public.customers', { name: 'public.orders', chunks: 2 }] })),
  },
  {
    name: 'full-validated-blocks',
    description: "full load after patch block-validation: a table of two chunks compared by its sides' sums over shares of blocks (checksumBlocks, one share per side at this size, run at once), before its chunks would be; a small table beside it",
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', validation: 'checksum', tables: ['public.customers', { name: 'public.orders', chunks: 2 }] })),
  },
  {
    name: 'full-small-tables-held',
    description: 'full load after patch small-table-reports-in-result: two small tables that send their parent no signal; their milestones come back in their results; checksum validation',
    schema: FULL_SCHEMA,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', batchRows: 100, validation: 'checksum', tables: ['public.customers', 'public.orders'] })),
  },
  {
    name: 'full-small-table-groups',
    description:
      'full load after patch small-table-groups: FULL_SCHEMA and 24 small tables more (26 small tables in all), copied in groups, ' +
      'each group one copySmallTables activity of the parent (copy, key, indexes, ANALYZE, validation per table): no table workflow; checksum validation',
    schema: `${FULL_SCHEMA}
CREATE SCHEMA crowd;
DO $$ BEGIN FOR i IN 1..24 LOOP
  EXECUTE format('CREATE TABLE crowd.t%s (id int PRIMARY KEY, v text)', i);
  EXECUTE format('INSERT INTO crowd.t%s SELECT g, md5(g::text) FROM generate_series(1, 20 + %s) g', i, i);
END LOOP; END $$;
ANALYZE;`,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', validation: 'checksum', tables: ['public.customers', 'public.orders', 'crowd.*'] })),
  },
  {
    name: 'full-stored-plan',
    description:
      'full load of FULL_SCHEMA and 505 small tables more (more than a plan page, PLAN_PAGE): preflight stores the plan on the target and returns it without its tables, ' +
      'the parent loads it a hundred tables at a time (planTables), prepareTarget, addForeignKeys and finishTarget read it there (storedFor); small tables in groups',
    schema: `${FULL_SCHEMA}
CREATE SCHEMA crowd;
DO $$ BEGIN FOR i IN 1..505 LOOP
  EXECUTE format('CREATE TABLE crowd.t%s (id int PRIMARY KEY, v text)', i);
  EXECUTE format('INSERT INTO crowd.t%s SELECT g, md5(g::text) FROM generate_series(1, 3) g', i);
END LOOP; END $$;
ANALYZE;`,
    expected: 'SUCCEEDED',
    run: fullLoad(() => ({ source: 'src', target: 'dst', validation: 'checksum', tables: ['public.customers', 'public.orders', 'crowd.*'] })),
  },
  {
    name: 'online-batched-reports',
    description: 'online after patch batched-reports (the last chunk, FULL_DONE and TableCopied in one signal), manual approval, writes during sync, approve',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    run: (ctx) => approvedOnline(ctx, { unfreeze: false }),
  },
  {
    name: 'online-busy-dwell',
    description:
      'online after patch busy-sync-dwell: at the approval an application updates a row every 100 ms, so the ready tables\' sync ' +
      'activities keep polling (busyDwellMs) instead of returning after each round; approved while it writes, the freeze ends its writes',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    run: approvedWhileWriting,
  },
  {
    name: 'online-sealed-drain',
    description:
      'online after patch sealed-drain: the tables re-check their dirty keys under their sync fence; approved while an application writes, ' +
      'the cutover asks every table to finish and drains without waiting for their workflows to end (its first slice of each takes the table\'s sync over), ' +
      'and awaits them past the point of no return',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    run: approvedWhileWriting,
  },
  {
    name: 'online-crowded-sync',
    description:
      'online after patch crowded-sync on a worker of one activity slot: an application writes to both tables at the approval, so a ready ' +
      'table\'s slice waits for the slot behind the other\'s dwell, finds it crowded, does not dwell, and the table pauses off the slot; approved while it writes',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    slots: 1,
    run: approvedWhileCrowded,
  },
  {
    name: 'online-cutover-queue',
    description:
      'online after patches tables-asked-after-outage and cutover-queue: approved while an application writes, the cutover runs its steps inside ' +
      'the write outage on the cutover task queue, drains without asking the tables anything, and asks them to finish past the point of no return',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    run: approvedWhileWriting,
  },
  {
    name: 'online-ready-queue',
    description:
      'online after patch ready-queue: once declared ready, each table runs its sync slices and re-checks on the ready task queue ' +
      '(<queue>-ready) while an application writes; approved while it writes, drained and cut over',
    schema: ONLINE_SCHEMA,
    expected: 'SUCCEEDED',
    run: (ctx) =>
      approvedWhileApplicationWrites(ctx, {
        write: (i) => ['UPDATE public.accounts SET balance = balance + 1 WHERE id = $1', [1 + (i % 400)]],
        everyMs: 100,
        // Or it is not the scenario it says: slices of both tables on the ready queue, and a re-check.
        approveWhen: async () => {
          const tables = await Promise.all([0, 1].map((index) => activityQueues(ctx.stack.client, workflowIds.table(ctx.id, index))));
          const onReady = (queues: Map<string, string[]>, type: string) => queues.get(type)?.includes(readyTaskQueue(ctx.stack.taskQueue)) === true;
          return tables.every((queues) => onReady(queues, 'syncChanges')) && tables.some((queues) => onReady(queues, 'checkDirtyKeys'));
        },
      }),
  },
  {
    name: 'online-armed-freeze',
    description:
      'online with unique columns, a foreign key and an index (built before the approval); approved while a write transaction is open: ' +
      'the cutover names it (CutoverBlocked) and ends it after maxWait (onBlocked: terminate); a long reader keeps capture from being ' +
      'dropped, so the cleanup helper removes it in the background once the reader ends (afterwards: unfreeze)',
    schema: ONLINE_SCHEMA_WITH_CONSTRAINTS,
    expected: 'SUCCEEDED',
    async run(ctx) {
      const { id, stack, dbs } = ctx;
      const spec = onlineSpec({
        tables: [{ name: 'public.accounts', chunks: 2 }, 'public.items', 'public.teams', 'public.members'],
        cutover: { approval: 'manual', approvalTimeout: '10m', maxWait: '3s', onBlocked: 'terminate', afterwards: 'unfreeze' },
      });
      await syncedAtApproval(ctx, spec);
      const blocker = new PgClient({ connectionString: dbs.url('source'), application_name: 'recording-blocker' });
      const reader = new PgClient({ connectionString: dbs.url('source'), application_name: 'recording-reader' });
      await Promise.all([blocker.connect(), reader.connect()]);
      blocker.on('error', () => undefined);
      await blocker.query('BEGIN');
      await blocker.query(`UPDATE public.teams SET name = name WHERE id = 1`);
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM public.members');
      try {
        await stack.ferry.approve(id);
        const result = await resultWithin(stack.ferry, id);
        await sameRows(dbs, [
          ...ONLINE_TABLES,
          ['public.teams', 'id'],
          ['public.members', 'id'],
        ]);
        return result;
      } finally {
        await reader.query('COMMIT');
        await reader.end();
        await blocker.end().catch(() => undefined);
      }
    },
  },
  {
    name: 'timed-out',
    description: 'online with a 6 s deadline and manual approval that never comes: TIMED_OUT, capture removed and target dropped',
    schema: ONLINE_SCHEMA,
    expected: 'TIMED_OUT',
    async run({ id, stack }) {
      await stack.ferry.start(onlineSpec({ deadline: '6s', cutover: { approval: 'manual', approvalTimeout: '10m' } }), { id });
      return resultWithin(stack.ferry, id);
    },
  },
];

/** A change plan's table on the source database (the `src` connection). */
const CHANGE_SCHEMA = `
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id bigint PRIMARY KEY, total int NOT NULL);
INSERT INTO shop.orders SELECT g, g % 100 FROM generate_series(1, 3000) g;
ANALYZE shop.orders;`;

SCENARIOS.push(
  {
    name: 'change',
    description:
      'a change plan (changeWorkflow): add a column with down:, a throttled backfill with until: all paused and resumed, a concurrent index, SET NOT NULL the safe way, validate, result callback with event webhooks',
    schema: CHANGE_SCHEMA,
    expected: 'SUCCEEDED',
    run: changePlan({
      plan: {
        throttle: { rowsPerSecond: 1000 },
        steps: [
          { sql: 'ALTER TABLE shop.orders ADD COLUMN note text', down: 'ALTER TABLE shop.orders DROP COLUMN note' },
          { backfill: { table: 'shop.orders', set: { note: "'n/a'" }, where: 'note IS NULL', batchRows: 500, until: 'all' } },
          { index: { table: 'shop.orders', name: 'orders_note_idx', columns: ['note'] } },
          { sql: 'ALTER TABLE shop.orders ALTER COLUMN note SET NOT NULL' },
          { sql: 'ALTER TABLE shop.orders ADD CONSTRAINT total_small CHECK (total < 1000) NOT VALID' },
          { validate: { table: 'shop.orders', constraint: 'total_small' } },
        ],
      },
      callback: true,
      async during({ id, stack }) {
        await eventually(async () => ((await stack.ferry.changeStatus(id)).steps[1].progress?.done ?? 0) > 0, 60_000);
        await stack.ferry.pause(id);
        await eventually(async () => (await stack.ferry.changeStatus(id)).waiting?.startsWith('paused'), 60_000);
        await stack.ferry.throttle(id, { rowsPerSecond: 0 });
        await stack.ferry.resume(id);
      },
    }),
  },
  {
    name: 'change-audited',
    description: 'a change plan whose control signals carry who sent them and why (audited-change-controls): a backfill paused, throttled, resumed, then cancelled',
    schema: CHANGE_SCHEMA,
    expected: 'CANCELLED',
    run: changePlan({
      plan: {
        throttle: { rowsPerSecond: 300 },
        steps: [{ backfill: { table: 'shop.orders', set: { total: 'total' }, batchRows: 100 } }],
      },
      callback: true,
      async during({ id, stack }) {
        await eventually(async () => ((await stack.ferry.changeStatus(id)).steps[0].progress?.done ?? 0) > 0, 60_000);
        await stack.ferry.pause(id, { actor: 'recorder', reason: 'a quiet hour' });
        await eventually(async () => (await stack.ferry.changeStatus(id)).waiting?.startsWith('paused'), 60_000);
        await stack.ferry.throttle(id, { rowsPerSecond: 600 }, { actor: 'recorder' });
        await stack.ferry.resume(id, { reason: 'quiet hour over' });
        await stack.ferry.cancel(id, 'recording over', 'recorder');
      },
    }),
  },
  {
    name: 'change-continued-as-new',
    description: 'a change plan with historyLimit 25 (change-continue-as-new): its backfill continues as new between slices and the next run takes the step up where it stopped',
    schema: CHANGE_SCHEMA,
    expected: 'SUCCEEDED',
    run: changePlan({
      plan: {
        throttle: { rowsPerSecond: 150 },
        steps: [
          { sql: 'ALTER TABLE shop.orders ADD COLUMN note text', down: 'ALTER TABLE shop.orders DROP COLUMN note' },
          { backfill: { table: 'shop.orders', set: { note: "'n/a'" }, batchRows: 100 } },
        ],
      },
      callback: true,
      startOptions: { historyLimit: 25 },
    }),
  },
  {
    name: 'change-rolled-back',
    description: 'a change plan whose VALIDATE fails: onFailure: rollback drops the index, the constraint and the column, newest first',
    schema: CHANGE_SCHEMA,
    expected: 'FAILED',
    run: changePlan({
      plan: {
        onFailure: 'rollback',
        steps: [
          { sql: 'ALTER TABLE shop.orders ADD COLUMN note text', down: 'ALTER TABLE shop.orders DROP COLUMN note' },
          { index: { table: 'shop.orders', name: 'orders_note_idx', columns: ['note'] } },
          { sql: 'ALTER TABLE shop.orders ADD CONSTRAINT total_big CHECK (total > 50) NOT VALID', down: 'ALTER TABLE shop.orders DROP CONSTRAINT total_big' },
          { validate: { table: 'shop.orders', constraint: 'total_big' } },
        ],
      },
    }),
  },
);

/** A table a rewrite step rebuilds, with a view and a foreign key that follow it. */
const REWRITE_SCHEMA = `
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id int PRIMARY KEY, total int NOT NULL, note text);
INSERT INTO shop.orders SELECT g, g % 100, 'seed' FROM generate_series(1, 3000) g;
CREATE VIEW shop.order_totals AS SELECT id, total FROM shop.orders;
CREATE TABLE shop.order_lines (id int PRIMARY KEY, order_id int NOT NULL REFERENCES shop.orders (id));
INSERT INTO shop.order_lines SELECT g, g FROM generate_series(1, 100) g;
ANALYZE shop.orders;`;

SCENARIOS.push({
  name: 'rewrite',
  description:
    'a change plan with a rewrite step: total int → bigint and note dropped through a shadow copy, writes during the copy, approval: manual approved, the swap moving a view and a foreign key, the old table dropped by rewriteRetireWorkflow after keepOld',
  schema: REWRITE_SCHEMA,
  expected: 'SUCCEEDED',
  run: changePlan({
    plan: {
      throttle: { rowsPerSecond: 3000 },
      steps: [
        {
          rewrite: {
            table: 'shop.orders',
            alter: ['ALTER COLUMN total TYPE bigint', 'DROP COLUMN note'],
            columns: { total: 'total::bigint * 10' },
            approval: 'manual',
            keepOld: '2s',
          },
        },
      ],
    },
    async during({ id, stack, dbs }) {
      await eventually(async () => (await stack.ferry.changeStatus(id)).steps[0].note === 'copying', 60_000);
      await dbs.exec('source', `UPDATE shop.orders SET total = total + 1 WHERE id <= 50; INSERT INTO shop.orders VALUES (5001, 7, 'new'); DELETE FROM shop.orders WHERE id = 3000;`);
      await eventually(async () => (await stack.ferry.changeStatus(id)).waiting?.includes('awaiting approval'), 60_000);
      await stack.ferry.approve(id);
    },
  }),
});

SCENARIOS.push({
  name: 'rewrite-reverted',
  description:
    'a rewrite step swapped, then `ferry revert` within keepOld (revertible-rewrite): writes to the new table carried back, the swap back, the new table dropped after keepOld',
  schema: REWRITE_SCHEMA,
  expected: 'SUCCEEDED',
  run: changePlan({
    plan: { steps: [{ rewrite: { table: 'shop.orders', alter: ['ALTER COLUMN total TYPE bigint', 'DROP COLUMN note'], approval: 'auto', keepOld: '15s' } }] },
    async after({ id, stack, dbs }) {
      await dbs.exec('source', `UPDATE shop.orders SET total = total + 1 WHERE id <= 50; INSERT INTO shop.orders (id, total) VALUES (5001, 7); DELETE FROM shop.orders WHERE id = 3000;`);
      const reverted = await stack.ferry.revert(id, 1, { actor: 'recorder', reason: 'recording' });
      if (reverted.phase !== 'REVERTED') throw new Error(`the revert failed: ${JSON.stringify(reverted)}`);
    },
  }),
});

SCENARIOS.push({
  name: 'change-cleaned-up',
  description: 'a change plan with a rewrite step cancelled while awaiting approval, then `ferry cleanup` (changeCleanupWorkflow): capture released, no shadow left to drop, bookkeeping forgotten',
  schema: REWRITE_SCHEMA,
  expected: 'CANCELLED',
  run: changePlan({
    plan: { steps: [{ rewrite: { table: 'shop.orders', alter: ['ALTER COLUMN total TYPE bigint'], approval: 'manual' } }] },
    async during({ id, stack }) {
      await eventually(async () => (await stack.ferry.changeStatus(id)).waiting?.includes('awaiting approval'), 60_000);
      await stack.ferry.cancel(id, 'recording a cleanup');
    },
    async after({ id, stack }) {
      const cleaned = await stack.ferry.cleanup(id);
      if (!cleaned.done) throw new Error('the cleanup did not finish');
    },
  }),
});

interface ManifestEntry {
  file: string;
  workflowType: string;
  workflowId: string;
  runId: string;
  /** How the run closed: COMPLETED, FAILED, CANCELLED, CONTINUED_AS_NEW, TERMINATED, … */
  status: string;
  events: number;
}

interface Manifest {
  scenario: string;
  description: string;
  recordedAt: string;
  sdk: string;
  temporalCli: string;
  executions: ManifestEntry[];
}

interface Recorded {
  info: WorkflowExecutionInfo;
  history: History;
}

/** Runs referenced by a history that must be recorded too: started children, the next run. */
function referencedRuns(history: History): string[] {
  const runs: string[] = [];
  for (const event of history.events ?? []) {
    const child = event.childWorkflowExecutionStartedEventAttributes?.workflowExecution?.runId;
    if (child) runs.push(child);
    const next = event.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId;
    if (next) runs.push(next);
  }
  return runs;
}

/**
 * Every execution in the (scenario's own) namespace with its history, once all have closed and
 * visibility lists every child and continued-as-new run the histories refer to.
 */
async function recordAll(client: Client): Promise<Recorded[]> {
  return eventually(
    async () => {
      const listed: WorkflowExecutionInfo[] = [];
      for await (const w of client.workflow.list()) listed.push(w);
      if (listed.some((w) => w.status.name === 'RUNNING')) return undefined;
      const runIds = new Set(listed.map((w) => w.runId));
      const recorded: Recorded[] = [];
      for (const info of listed) {
        const history = await client.workflow.getHandle(info.workflowId, info.runId).fetchHistory();
        if (referencedRuns(history).some((run) => !runIds.has(run))) return undefined;
        recorded.push({ info, history });
      }
      return recorded;
    },
    60_000,
    500,
  );
}

function writeScenario(scenario: Scenario, recorded: Recorded[], temporalCli: string): ManifestEntry[] {
  const dir = join(FIXTURES_DIR, scenario.name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const ordered = [...recorded].sort(
    (a, b) =>
      a.info.type.localeCompare(b.info.type) ||
      a.info.workflowId.localeCompare(b.info.workflowId, 'en', { numeric: true }) ||
      a.info.startTime.getTime() - b.info.startTime.getTime(),
  );
  const counts = new Map<string, number>();
  const entries = ordered.map(({ info, history }) => {
    const n = (counts.get(info.type) ?? 0) + 1;
    counts.set(info.type, n);
    const file = `${info.type}-${n}.json`;
    writeFileSync(join(dir, file), `${historyToJSON(history)}\n`);
    return { file, workflowType: info.type, workflowId: info.workflowId, runId: info.runId, status: info.status.name, events: history.events?.length ?? 0 };
  });
  const manifest: Manifest = {
    scenario: scenario.name,
    description: scenario.description,
    recordedAt: new Date().toISOString(),
    sdk: JSON.parse(readFileSync(require.resolve('@temporalio/workflow/package.json'), 'utf8')).version,
    temporalCli,
    executions: entries,
  };
  writeFileSync(join(dir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return entries;
}

async function recordScenario(scenario: Scenario, temporalCli: string): Promise<void> {
  const started = Date.now();
  process.stdout.write(`\n== ${scenario.name}: ${scenario.description}\n`);
  const cluster = scenario.logical ? await startLogicalCluster() : undefined;
  const dbs = await TestDatabases.create(`rec_${scenario.name}`, ['source', 'target'], cluster?.url);
  let stack: TestStack | undefined;
  const receiver = await Receiver.start();
  let pooler: PgBouncer | undefined;
  const nats = scenario.nats ? await startNatsServer() : undefined;
  try {
    await dbs.exec('source', scenario.schema);
    const source = new URL(dbs.url('source'));
    if (scenario.pooler) pooler = await startPgBouncer({ app: { host: source.hostname, port: Number(source.port || 5432), dbname: source.pathname.slice(1) } });
    const admin: Record<string, string> = pooler ? { pooladmin: pooler.adminUrl } : {};
    // The receiver is on 127.0.0.1, a target workers refuse unless allowed.
    const streamEnv: Record<string, string> = nats ? { FERRY_NATS_URL: nats.url, FERRY_SECRET_APPROVE: APPROVAL_KEY } : {};
    stack = await TestStack.start({
      connections: { src: dbs.url('source'), dst: dbs.url('target'), ...admin },
      extraEnv: { FERRY_CALLBACK_ALLOW_PRIVATE: 'true', FERRY_SECRET_SWITCH: 'recorded', ...streamEnv },
      ...(scenario.slots ? { workerOptions: () => ({ activitySlots: scenario.slots }) } : {}),
    });
    const result = await scenario.run({ id: `fixture-${scenario.name}`, stack, dbs, receiver, pooler, nats });
    if (result.state !== scenario.expected) {
      throw new Error(`${scenario.name}: expected ${scenario.expected}, the migration ended ${result.state}: ${JSON.stringify(result.error)}`);
    }
    const entries = writeScenario(scenario, await recordAll(stack.client), temporalCli);
    for (const e of entries) {
      const path = join(FIXTURES_DIR, scenario.name, e.file);
      const kb = (statSync(path).size / 1024).toFixed(1);
      process.stdout.write(`   ${relative(process.cwd(), path)}  ${e.status}  ${e.events} events  ${kb} KB\n`);
    }
    process.stdout.write(`== ${scenario.name}: ${entries.length} histories in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  } finally {
    await stack?.teardown();
    await pooler?.stop();
    await nats?.remove();
    await receiver.close();
    await dbs.drop();
    await cluster?.stop();
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const force = args.includes('--force');
  const named = args.filter((a) => !a.startsWith('--'));
  const unknown = named.filter((n) => !SCENARIOS.some((s) => s.name === n));
  if (unknown.length) throw new Error(`unknown scenario(s) ${unknown.join(', ')}; known: ${SCENARIOS.map((s) => s.name).join(', ')}`);
  const chosen = SCENARIOS.filter((s) => (named.length === 0 || named.includes(s.name)) && (force || !existsSync(join(FIXTURES_DIR, s.name))));
  if (chosen.length === 0) {
    process.stdout.write('every scenario has fixtures already; a workflow change that breaks their replay needs patched(), not new fixtures (--force re-records)\n');
    return;
  }
  // Fixtures are plain payloads: readable in review and replayable without a key.
  delete process.env.FERRY_CODEC_KEY;
  const pg = (process.env.FERRY_TEST_PG ??= DEFAULT_TEST_PG);
  await ensurePostgres(pg);
  const binary = await ensureTemporalBinary();
  if (binary) process.env.FERRY_TEMPORAL_BIN = binary;
  const temporalCli = binary ? temporalVersion(binary) : 'downloaded by @temporalio/testing';
  for (const scenario of chosen) await recordScenario(scenario, temporalCli);
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`record-histories: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
