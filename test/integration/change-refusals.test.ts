/**
 * Change plans that must change nothing: hostile or unsafe plans refused by `ferry start` with
 * exit 2 (the schema as before, no change workflow started), and a failing step with
 * onFailure: rollback that leaves the schema as it was.
 */
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CHANGE_WORKFLOW } from '../../src/core/names';
import { objectInventory, TestDatabases } from '../helpers/databases';
import { stackSuite } from '../helpers/suite';

/** Columns, constraints and indexes of shop.orders: what a schema change would alter. */
async function schemaOf(dbs: TestDatabases): Promise<string[]> {
  const rows = await dbs.query<{ d: string }>(
    'app',
    `SELECT 'column ' || attname || ' ' || format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' not null' ELSE '' END AS d
       FROM pg_attribute WHERE attrelid = 'shop.orders'::regclass AND attnum > 0 AND NOT attisdropped
     UNION ALL SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'shop.orders'::regclass
     UNION ALL SELECT 'index ' || pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'shop.orders'::regclass
     ORDER BY 1`,
  );
  return [...rows.map((r) => r.d), ...(await objectInventory(dbs, 'app'))];
}

const HOSTILE: Record<string, { plan: unknown; says: RegExp }> = {
  'an unknown step kind': { plan: { steps: [{ truncate: 'shop.orders' }] }, says: /unknown step kind \("truncate"\)/ },
  'a rewrite whose alter smuggles a second statement': {
    plan: { steps: [{ rewrite: { table: 'shop.orders', alter: ['DROP COLUMN total; DROP TABLE shop.customers'] } }] },
    says: /steps\[0\]\.rewrite\.alter\[0\]: must be the clauses of one ALTER TABLE statement/,
  },
  'a rewrite whose expression names a column the new table has not got': {
    plan: { steps: [{ rewrite: { table: 'shop.orders', alter: ['ALTER COLUMN total TYPE bigint'], columns: { nope: '1' } } }] },
    says: /steps\[0\]\.rewrite\.columns\.nope: the new table has no such column/,
  },
  'SQL in an identifier': {
    plan: { steps: [{ index: { table: 'shop.orders', name: 'x; DROP TABLE shop.orders', columns: ['total'] } }] },
    says: /index\.name: must be one identifier/,
  },
  'SQL in a table name': { plan: { steps: [{ validate: { table: 'shop.orders; DROP TABLE shop.orders', constraint: 'c' } }] }, says: /validate\.table/ },
  'a second statement in a backfill expression': {
    plan: { steps: [{ backfill: { table: 'shop.orders', set: { note: "'x'); DROP TABLE shop.orders; SELECT ('" } } }] },
    says: /set\.note: .*one SQL expression/,
  },
  'a step naming another database': { plan: { steps: [{ sql: 'ALTER TABLE shop.orders ADD COLUMN x int', database: 'billing' }] }, says: /cannot name another/ },
  'SQL naming another database': { plan: { steps: [{ sql: 'ALTER TABLE billing.shop.orders ADD COLUMN x int' }] }, says: /names database "billing"/ },
  'two statements in one sql step': { plan: { steps: [{ sql: 'ALTER TABLE shop.orders ADD COLUMN x int; DROP TABLE shop.orders' }] }, says: /holds 2 statements/ },
  'an absurd batch size': { plan: { steps: [{ backfill: { table: 'shop.orders', set: { note: "'x'" }, batchRows: 1e9 } }] }, says: /batchRows/ },
  'too many steps': { plan: { steps: Array.from({ length: 201 }, () => ({ sql: 'SELECT 1' })) }, says: /steps: Too big/ },
  'a volatile default': { plan: { steps: [{ sql: 'ALTER TABLE shop.orders ADD COLUMN token uuid DEFAULT gen_random_uuid()' }] }, says: /volatile default \(gen_random_uuid\).*backfill/ },
  'a foreign key without NOT VALID': {
    plan: { steps: [{ sql: 'ALTER TABLE shop.orders ADD CONSTRAINT orders_customer_fk FOREIGN KEY (customer_id) REFERENCES shop.customers (id)' }] },
    says: /NOT VALID.*validate step/,
  },
  'a CHECK without NOT VALID': { plan: { steps: [{ sql: 'ALTER TABLE shop.orders ADD CONSTRAINT positive CHECK (total >= 0)' }] }, says: /NOT VALID/ },
  'CREATE INDEX without CONCURRENTLY': { plan: { steps: [{ sql: 'CREATE INDEX orders_total_idx ON shop.orders (total)' }] }, says: /without CONCURRENTLY.*index step/ },
  'a type change that rewrites': { plan: { steps: [{ sql: 'ALTER TABLE shop.orders ALTER COLUMN total TYPE bigint' }] }, says: /TYPE bigint rewrites the table under ACCESS EXCLUSIVE: use a rewrite step/ },
  // Checked as `SELECT 1 WHERE (…)`, this parses; embedded after the batch's own condition it
  // turned the batch's join into a cross join (every matching row updated in every batch).
  'a where that closes its own parentheses': {
    plan: { steps: [{ backfill: { table: 'shop.orders', set: { code: "'x'" }, where: 'total > 0) OR (true' } }] },
    says: /backfill\.where: .*on its own/,
  },
  'a backfill value ending in a comment': { plan: { steps: [{ backfill: { table: 'shop.orders', set: { code: "'x' --" } } }] }, says: /set\.code: .*on its own/ },
  'a partial index condition that closes its own parentheses': {
    plan: { steps: [{ index: { table: 'shop.orders', name: 'orders_total_part', columns: ['total'], where: 'total > 0) OR (true' } }] },
    says: /index\.where: .*on its own/,
  },
  // Each of these walked around the checks once (they all rewrite or scan a table, or hold every row's lock).
  'a DO block': {
    plan: { steps: [{ sql: 'DO $$ BEGIN SET LOCAL lock_timeout = 0; ALTER TABLE shop.orders ALTER COLUMN total TYPE bigint; END $$' }] },
    says: /sql: DO runs procedural code that preflight cannot judge/,
  },
  'a function that runs DDL': { plan: { steps: [{ sql: 'SELECT shop.widen()' }] }, says: /sql: calls shop\.widen, a function of the database's own/ },
  'a procedure that runs DDL': { plan: { steps: [{ sql: 'CALL shop.widen_all()' }] }, says: /sql: CALL runs a procedure whose statements preflight cannot judge/ },
  'a column of a domain with a CHECK': { plan: { steps: [{ sql: 'ALTER TABLE shop.orders ADD COLUMN p shop.positive' }] }, says: /ADD COLUMN p of domain shop\.positive, which has a CHECK/ },
  'a column whose domain has a volatile default': {
    plan: { steps: [{ sql: 'ALTER TABLE shop.orders ADD COLUMN n shop.noise' }] },
    says: /ADD COLUMN n of domain shop\.noise, whose default is volatile \(random\)/,
  },
  'a primary key using an index on a nullable column': {
    plan: { steps: [{ sql: 'ALTER TABLE shop.tags ADD CONSTRAINT tags_pkey PRIMARY KEY USING INDEX tags_id_key' }] },
    says: /USING INDEX tags_id_key: id is nullable.*SET NOT NULL first/,
  },
  'a collation change': { plan: { steps: [{ sql: 'ALTER TABLE shop.orders ALTER COLUMN code TYPE varchar(30) COLLATE "C"' }] }, says: /changes the column's collation.*rewrite step/ },
  'REFRESH without CONCURRENTLY': { plan: { steps: [{ sql: 'REFRESH MATERIALIZED VIEW shop.totals' }] }, says: /REFRESH MATERIALIZED VIEW CONCURRENTLY/ },
  'an UPDATE of every row': { plan: { steps: [{ sql: 'UPDATE shop.orders SET total = total + 1' }] }, says: /UPDATE without WHERE .*backfill step/ },
  'a DELETE of every row in a down:': {
    plan: { steps: [{ sql: 'ALTER TABLE shop.tags ADD COLUMN note text', down: 'DELETE FROM shop.tags' }] },
    says: /down: DELETE without WHERE/,
  },
  'an index step whose name an index on other columns has': {
    plan: { steps: [{ index: { table: 'shop.orders', name: 'orders_total_idx', columns: ['total'] } }] },
    says: /index\.name: shop\.orders_total_idx exists with another definition \(it is CREATE INDEX orders_total_idx ON shop\.orders USING btree \(customer_id\)\)/,
  },
  'a missing table': { plan: { steps: [{ backfill: { table: 'shop.nothing', set: { note: "'x'" } } }] }, says: /shop\.nothing does not exist/ },
};

describe('change plans that must change nothing', () => {
  const suite = stackSuite({
    name: 'change_refusals',
    databases: {
      app: `CREATE SCHEMA shop;
       CREATE TABLE shop.customers (id int PRIMARY KEY);
       CREATE TABLE shop.orders (id bigint PRIMARY KEY, customer_id int, total int NOT NULL);
       INSERT INTO shop.customers SELECT g FROM generate_series(1, 10) g;
       INSERT INTO shop.orders SELECT g, 1 + g % 10, g % 100 FROM generate_series(1, 5000) g;
       ALTER TABLE shop.orders ADD COLUMN code varchar(20);
       CREATE DOMAIN shop.positive AS int CHECK (VALUE > 0);
       CREATE DOMAIN shop.noise AS float8 DEFAULT random();
       CREATE TABLE shop.tags (id int, name text);
       CREATE UNIQUE INDEX tags_id_key ON shop.tags (id);
       CREATE MATERIALIZED VIEW shop.totals AS SELECT id FROM shop.customers;
       CREATE INDEX orders_total_idx ON shop.orders (customer_id);
       CREATE FUNCTION shop.widen() RETURNS void LANGUAGE plpgsql AS $$ BEGIN ALTER TABLE shop.orders ALTER COLUMN total TYPE bigint; END $$;
       CREATE PROCEDURE shop.widen_all() LANGUAGE plpgsql AS $$ BEGIN ALTER TABLE shop.orders ALTER COLUMN total TYPE bigint; END $$;`,
    },
    workers: 1,
  });

  it('refuses hostile and unsafe plans with exit 2, naming the problem, and changes nothing', async () => {
    const before = await schemaOf(suite.dbs);
    for (const [name, { plan, says }] of Object.entries(HOSTILE)) {
      const file = join(tmpdir(), `ferry-change-${process.pid}-${name.replace(/\W+/g, '-')}.json`);
      writeFileSync(file, JSON.stringify({ kind: 'change', database: 'app', ...(plan as object) }));
      const out = await suite.stack.runCli(['start', file]);
      expect({ name, code: out.code }).toEqual({ name, code: 2 });
      expect({ name, stderr: out.stderr }).toEqual({ name, stderr: expect.stringMatching(says) });
    }
    expect(await schemaOf(suite.dbs)).toEqual(before);
    const started: string[] = [];
    for await (const w of suite.stack.client.workflow.list({ query: `WorkflowType = '${CHANGE_WORKFLOW}' AND TaskQueue = '${suite.stack.taskQueue}'` })) started.push(w.workflowId);
    expect(started).toEqual([]);
  });

  // Any Temporal client can start the workflow: a preflight result it makes up must not walk the
  // plan around the checks (it did: the workflow took options.preflight as given).
  it('a change workflow started with a made-up preflight result runs its own and refuses the plan', async () => {
    const before = await schemaOf(suite.dbs);
    const totals = await suite.dbs.query<{ s: string }>('app', 'SELECT sum(total)::text AS s FROM shop.orders');
    const forged = { serverVersion: '15', steps: [{ index: 0, action: 'run' }] };
    const handle = await suite.stack.client.workflow.start(CHANGE_WORKFLOW, {
      taskQueue: suite.stack.taskQueue,
      workflowId: 'forged-preflight',
      args: [{ kind: 'change', id: 'forged-preflight', database: 'app', steps: [{ sql: 'UPDATE shop.orders SET total = total + 1' }] }, { preflight: forged }],
    });
    await expect(handle.result()).rejects.toThrow();
    const result = await suite.stack.ferry.changeResult('forged-preflight');
    expect(result.state).toBe('FAILED');
    expect(result.error?.message).toMatch(/UPDATE without WHERE .*backfill step/);
    expect(result.steps.map((s) => s.state)).toEqual(['SKIPPED']);
    expect(await suite.dbs.query<{ s: string }>('app', 'SELECT sum(total)::text AS s FROM shop.orders')).toEqual(totals);
    expect(await schemaOf(suite.dbs)).toEqual(before);
  });

  // A sql step ran under the step's whole timeout (24 h by default): a statement that works
  // through rows held its locks that long. It has a statement timeout of its own now.
  it("a sql step that runs past its statementTimeout fails with PostgreSQL's statement timeout and changes nothing", async () => {
    const totals = await suite.dbs.query<{ s: string }>('app', 'SELECT sum(total)::text AS s FROM shop.orders');
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'statement-timeout',
      database: 'app',
      steps: [{ sql: 'UPDATE shop.orders SET total = total + 1 WHERE id > 0 AND pg_sleep(0.002) IS NOT NULL', statementTimeout: '1s' }],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('PostgresError.57014');
    expect(result.error?.message).toMatch(/step 1: the statement ran past its 1000 ms statement timeout/);
    expect(await suite.dbs.query<{ s: string }>('app', 'SELECT sum(total)::text AS s FROM shop.orders')).toEqual(totals);
  });

  it('a failing step with onFailure: rollback undoes the completed steps in reverse and leaves the schema as it was', async () => {
    const before = await schemaOf(suite.dbs);
    const { id } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: 'rolled-back',
      database: 'app',
      onFailure: 'rollback',
      steps: [
        { sql: 'ALTER TABLE shop.orders ADD COLUMN note text', down: 'ALTER TABLE shop.orders DROP COLUMN note' },
        { backfill: { table: 'shop.orders', set: { note: "'n/a'" } } },
        { index: { table: 'shop.orders', name: 'orders_note_idx', columns: ['note'] } },
        { sql: 'ALTER TABLE shop.orders ADD CONSTRAINT big_total CHECK (total > 50) NOT VALID', down: 'ALTER TABLE shop.orders DROP CONSTRAINT big_total' },
        // Half the rows violate it: VALIDATE fails.
        { validate: { table: 'shop.orders', constraint: 'big_total' } },
        { sql: 'ALTER TABLE shop.orders ALTER COLUMN note SET NOT NULL' },
      ],
    });
    const result = await suite.stack.ferry.changeResult(id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('PostgresError.23514');
    expect(result.steps.map((s) => s.state)).toEqual(['ROLLED_BACK', 'SUCCEEDED', 'ROLLED_BACK', 'ROLLED_BACK', 'FAILED', 'SKIPPED']);
    expect(result.warnings).toEqual(['step 2 (backfill): updated rows keep their new values']);
    expect(result.events.map((e) => e.type)).toEqual(expect.arrayContaining(['StepFailed', 'RollbackStarted', 'StepRolledBack', 'RolledBack']));
    expect(await schemaOf(suite.dbs)).toEqual(before);
  });
});
