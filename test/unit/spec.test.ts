import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkThrottle, parseSpec, SpecError, specJsonSchema } from '../../src/core/spec';
import { Client } from '@temporalio/client';
import { FerryClient } from '../../src/client';
import { decodeSpecText } from '../../src/spec-file';
import { specProblems } from '../helpers/spec-problems';

const problems = specProblems;

const minimal = { source: 'legacy', target: 'v2', tables: ['public.orders'] };
const POOL = { admin: 'pooladmin', database: 'app', configFile: '/etc/pgbouncer/databases.ini', taskQueue: 'ferry-switch-pooler1' };
const HOOK = { url: 'https://switch.example/ferry', secret: 'FERRY_SECRET_SWITCH' };

describe('the spec', () => {
  it('applies the documented defaults to a minimal spec', () => {
    expect(parseSpec(minimal)).toEqual({
      id: undefined,
      source: 'legacy',
      target: 'v2',
      mode: 'full',
      tables: [{ source: { schema: 'public', name: 'orders' }, target: { schema: 'public', name: 'orders' } }],
      truncate: false,
      batchRows: undefined,
      validation: 'checksum',
      parallelism: { tables: 2, chunks: 2, indexes: 2, apply: 1 },
      cutover: undefined,
      onFailure: 'rollback',
      deadlineMs: undefined,
      callback: undefined,
      metadata: undefined,
    });
  });

  it('reads quoted identifiers, folds unquoted ones and maps targets', () => {
    const spec = parseSpec({
      ...minimal,
      tables: ['app."Order Lines"', 'Public.Orders', { name: '"My ""Schema"""."x.y"', target: 'archive.xy', chunks: 8 }],
    });
    expect(spec.tables).toEqual([
      { source: { schema: 'app', name: 'Order Lines' }, target: { schema: 'app', name: 'Order Lines' } },
      { source: { schema: 'public', name: 'orders' }, target: { schema: 'public', name: 'orders' } },
      { source: { schema: 'My "Schema"', name: 'x.y' }, target: { schema: 'archive', name: 'xy' }, chunks: 8 },
    ]);
  });

  it('turns online-mode options and durations into their normalised form', () => {
    const spec = parseSpec({ ...minimal, mode: 'online', cutover: { approval: 'manual', approvalTimeout: '1h30m' }, deadline: '12h' });
    expect(spec.cutover).toEqual({ approval: 'manual', approvalTimeoutMs: 5_400_000, afterwards: 'keep-frozen', maxWaitMs: 300_000, onBlocked: 'rollback' });
    expect(spec.deadlineMs).toBe(43_200_000);
    expect(parseSpec({ ...minimal, mode: 'online' }).cutover).toEqual({
      approval: 'auto',
      approvalTimeoutMs: 86_400_000,
      afterwards: 'keep-frozen',
      maxWaitMs: 300_000,
      onBlocked: 'rollback',
    });
    expect(parseSpec({ ...minimal, mode: 'online', cutover: { maxWait: '90s', onBlocked: 'terminate' } }).cutover).toMatchObject({
      maxWaitMs: 90_000,
      onBlocked: 'terminate',
    });
  });

  it('takes one switcher for the cutover: PgBouncer as given, a webhook with its timeout in milliseconds (30 s by default)', () => {
    expect(parseSpec({ ...minimal, mode: 'online', cutover: { switch: { pgbouncer: POOL } } }).cutover?.switch).toEqual({ pgbouncer: POOL });
    expect(parseSpec({ ...minimal, mode: 'online', cutover: { switch: { webhook: HOOK } } }).cutover?.switch).toEqual({ webhook: { url: HOOK.url, secret: HOOK.secret, timeoutMs: 30_000 } });
    expect(parseSpec({ ...minimal, mode: 'online', cutover: { switch: { webhook: { ...HOOK, timeout: '2m' } } } }).cutover?.switch).toMatchObject({ webhook: { timeoutMs: 120_000 } });
    expect(parseSpec({ ...minimal, mode: 'online' }).cutover).not.toHaveProperty('switch');
  });

  it('defaults capture to auto in online mode, keeps an explicit choice, and has none in full mode', () => {
    expect(parseSpec({ ...minimal, mode: 'online' }).capture).toBe('auto');
    expect(parseSpec({ ...minimal, mode: 'online', capture: 'logical' }).capture).toBe('logical');
    expect(parseSpec({ ...minimal, mode: 'online', capture: 'trigger' }).capture).toBe('trigger');
    expect(parseSpec(minimal).capture).toBeUndefined();
  });

  it.each([
    [{ ...minimal, mode: 'online', capture: 'wal' }, 'capture: Invalid option'],
    [{ ...minimal, capture: 'logical' }, 'capture: applies only to mode: online'],
    [{ ...minimal, extra: 1 }, 'spec: unknown key "extra"'],
    [{ ...minimal, tables: [] }, 'tables: Too small'],
    [{ ...minimal, tables: ['orders'] }, 'tables[0]: must be qualified as schema.table'],
    [{ ...minimal, tables: ['public.orders', 'PUBLIC.ORDERS'] }, 'tables[1]: lists public.orders again'],
    [{ ...minimal, tables: ['a.x', { name: 'b.y', target: 'a.x' }] }, 'tables[1]: targets a.x'],
    [{ ...minimal, tables: ['public."unterminated'] }, 'tables[0]: has an unterminated quoted identifier'],
    [{ ...minimal, tables: [{ name: 'public.t', chunks: 0 }] }, 'tables[0].chunks'],
    [{ ...minimal, tables: [{ name: 'public.t', chunks: 100000 }] }, 'tables[0].chunks'],
    [{ ...minimal, tables: [{ name: 'public.t', chunks: 1.5 }] }, 'tables[0].chunks'],
    [{ ...minimal, tables: ['public.t; DROP TABLE x'] }, 'tables[0]: must be schema.table'],
    [{ ...minimal, batchRows: -1 }, 'batchRows: Too small'],
    [{ ...minimal, batchRows: '100' }, 'batchRows: Invalid input: expected number'],
    [{ ...minimal, source: 'postgres://u:p@host/db' }, 'source: must be a connection name'],
    [{ ...minimal, target: 'legacy', source: 'legacy' }, 'tables[0]: source and target are the same table'],
    [{ ...minimal, mode: 'fast' }, 'mode: Invalid option'],
    [{ ...minimal, cutover: { approval: 'manual' } }, 'cutover: applies only to mode: online'],
    [{ ...minimal, mode: 'online', cutover: { approvalTimeout: 'soon' } }, 'cutover.approvalTimeout: must be a duration'],
    [{ ...minimal, deadline: '0s' }, 'deadline: must be between'],
    [{ ...minimal, deadline: '12' }, 'deadline: must be a duration'],
    [{ ...minimal, callback: { url: 'ftp://example.com/x' } }, 'callback.url: must be an http:// or https:// URL'],
    [{ ...minimal, callback: { url: 'https://example.com', secret: 's3cr3t-value!' } }, 'callback.secret: must be the name of a workers\' environment variable that starts with FERRY_SECRET_'],
    [{ ...minimal, callback: { url: 'https://example.com', secret: 'FERRY_CONN_X' } }, 'callback.secret: must be the name of a workers\' environment variable that starts with FERRY_SECRET_'],
    [{ ...minimal, callback: { url: 'https://example.com', secret: 'TEMPORAL_API_KEY' } }, 'callback.secret: must be the name of a workers\' environment variable that starts with FERRY_SECRET_'],
    [{ ...minimal, callback: { url: 'https://example.com', secret: 'FERRY_SECRET_' } }, 'callback.secret: must be the name'],
    [{ ...minimal, metadata: { blob: 'x'.repeat(17_000) } }, 'metadata: must serialise to at most 16384 bytes'],
    [{ ...minimal, validation: 'sometimes' }, 'validation: Invalid option'],
    [{ ...minimal, id: '../etc' }, 'id: must be 1-100 letters'],
    [{ ...minimal, mode: 'online', cutover: { approval: 'event' } }, 'cutover.approvalSecret: is required with approval: event'],
    [{ ...minimal, mode: 'online', cutover: { approval: 'manual', approvalSecret: 'FERRY_SECRET_APPROVE' } }, 'cutover.approvalSecret: applies only to approval: event'],
    [{ ...minimal, mode: 'online', cutover: { approval: 'event', approvalSecret: 'the-key' } }, "cutover.approvalSecret: must be the name of a workers' environment variable"],
    [{ ...minimal, mode: 'online', cutover: { switch: {} } }, 'cutover.switch: give exactly one switcher'],
    [{ ...minimal, mode: 'online', cutover: { switch: { pgbouncer: POOL, webhook: HOOK } } }, 'cutover.switch: give exactly one switcher'],
    [{ ...minimal, mode: 'online', cutover: { switch: { pgbouncer: { ...POOL, configFile: 'pgbouncer/databases.ini' } } } }, 'cutover.switch.pgbouncer.configFile: must be an absolute path'],
    [{ ...minimal, mode: 'online', cutover: { switch: { pgbouncer: { ...POOL, admin: 'postgres://pgbouncer@pooler/pgbouncer' } } } }, 'cutover.switch.pgbouncer.admin: must be a connection name'],
    [{ ...minimal, mode: 'online', cutover: { switch: { pgbouncer: { ...POOL, taskQueue: 'a queue' } } } }, 'cutover.switch.pgbouncer.taskQueue: must be 1-200 letters'],
    [{ ...minimal, mode: 'online', cutover: { switch: { pgbouncer: { ...POOL, database: 'app db' } } } }, 'cutover.switch.pgbouncer.database: must be the name of a database'],
    [{ ...minimal, mode: 'online', cutover: { switch: { webhook: { ...HOOK, secret: 'hunter2' } } } }, 'cutover.switch.webhook.secret: must be the name of a workers\' environment variable'],
    [{ ...minimal, mode: 'online', cutover: { switch: { webhook: { ...HOOK, url: 'https://u:p@switch.example' } } } }, 'sign requests with cutover.switch.webhook.secret instead'],
    [{ ...minimal, mode: 'online', cutover: { switch: { webhook: { ...HOOK, timeout: '1h' } } } }, 'cutover.switch.webhook.timeout: must be between'],
  ])('refuses a bad spec with a message naming the field (%#)', (input, expected) => {
    expect(problems(input).join('\n')).toContain(expected);
  });

  it('reads YAML and refuses duplicate keys there', () => {
    expect(decodeSpecText('source: a\ntarget: b\ntables: [public.t]\n', 'x.yaml')).toEqual({ source: 'a', target: 'b', tables: ['public.t'] });
    expect(() => decodeSpecText('source: a\nsource: b\n', 'x.yaml')).toThrow(/unique|duplicate/i);
    expect(() => decodeSpecText('{"source":', 'x.json')).toThrow(SpecError);
  });

  it('publishes a JSON Schema that matches the zod schema', () => {
    const published = JSON.parse(readFileSync(join(__dirname, '..', '..', 'schema', 'ferry-spec.schema.json'), 'utf8'));
    expect(published).toEqual(JSON.parse(JSON.stringify(specJsonSchema())));
    expect(published.additionalProperties).toBe(false);
    // docs/reference/spec.md is generated from the same schema (npm run docs; docs.test.ts keeps it current).
    const reference = readFileSync(join(__dirname, '..', '..', 'docs', 'reference', 'spec.md'), 'utf8');
    expect(reference).toContain('| `cutover.approvalTimeout` | string | `"24h"` |');
    expect(published.required).toEqual(['source', 'target', 'tables']);
  });
});

describe('throttle signal values', () => {
  it('accepts whole numbers in range and refuses anything else with the field named', () => {
    expect(checkThrottle({ rowsPerSecond: 5000, batchRows: 2000 })).toEqual({ ok: true, value: { rowsPerSecond: 5000, batchRows: 2000 } });
    expect(checkThrottle({ rowsPerSecond: 0 })).toEqual({ ok: true, value: { rowsPerSecond: 0 } });
    for (const bad of [{ batchRows: 0 }, { batchRows: 2.5 }, { batchRows: 'x' }, { batchRows: 10_000_000 }]) {
      expect(checkThrottle(bad)).toMatchObject({ ok: false, reason: expect.stringContaining('throttle.batchRows') });
    }
    expect(checkThrottle({ rowsPerSecond: -1 })).toMatchObject({ ok: false, reason: expect.stringContaining('throttle.rowsPerSecond') });
    expect(checkThrottle({ rows: 5 })).toMatchObject({ ok: false, reason: expect.stringContaining('unknown field rows') });
    expect(checkThrottle(null)).toMatchObject({ ok: false });
    expect(checkThrottle([1])).toMatchObject({ ok: false });
  });
});

describe('start --id', () => {
  it('is validated like spec.id before anything reaches Temporal', async () => {
    const ferry = FerryClient.fromClient({ options: { namespace: 'default' } } as Client, { taskQueue: 'unused' }); // never called: refused first
    const spec = { source: 'a', target: 'b', tables: ['public.t'] };
    const err = await ferry.start(spec, { id: '../../etc/passwd' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SpecError);
    expect((err as SpecError).problems[0].path).toBe('id');
  });
});
