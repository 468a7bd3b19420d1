/**
 * Result callbacks and event webhooks against a real HTTP receiver (DESIGN.md §4): retried on
 * 5xx with the same Idempotency-Key and a signature that verifies, not retried on other 4xx, a
 * failed delivery recorded in the result without changing the migration's outcome.
 */
import { randomBytes } from 'node:crypto';
import { TestDatabases } from '../helpers/databases';
import { Receiver, signatureVerifies } from '../helpers/receiver';
import { eventually, resultWithin, TestStack } from '../helpers/stack';

const SECRET = randomBytes(24).toString('hex');

describe('callbacks', () => {
  let dbs: TestDatabases;
  let stack: TestStack;
  let receiver: Receiver;

  beforeAll(async () => {
    dbs = await TestDatabases.create('notify', ['source', 'target']);
    await dbs.exec(
      'source',
      `CREATE TABLE public.a (id int PRIMARY KEY, v text);
       INSERT INTO public.a SELECT g, 'v' || g FROM generate_series(1, 500) g;
       CREATE TABLE public.b (id int PRIMARY KEY, v text);
       INSERT INTO public.b SELECT g, 'v' || g FROM generate_series(1, 500) g;
       CREATE TABLE public.c (id int PRIMARY KEY, v text);
       INSERT INTO public.c SELECT g, 'v' || g FROM generate_series(1, 500) g;`,
    );
    receiver = await Receiver.start();
    stack = await TestStack.start({ connections: { src: dbs.url('source'), dst: dbs.url('target') }, extraEnv: { HOOK_SECRET: SECRET } });
  });

  afterAll(async () => {
    await stack?.teardown();
    await receiver?.close();
    await dbs?.drop();
  });

  it('retries a result callback after 500, 500 until 200: one delivery, one key, signed every time', async () => {
    receiver.answer('/retry', 500, 500, 200);
    const { id } = await stack.ferry.start({
      source: 'src',
      target: 'dst',
      tables: ['public.a'],
      metadata: { team: 'payments' },
      callback: { url: `${receiver.url}/retry`, secret: 'HOOK_SECRET' },
    });
    const result = await resultWithin(stack.ferry, id);
    expect(result.state).toBe('SUCCEEDED');
    expect(result.callback).toEqual({ delivered: true });

    const attempts = receiver.to('/retry');
    expect(attempts.map((a) => a.answered)).toEqual([500, 500, 200]);
    expect(new Set(attempts.map((a) => a.headers['idempotency-key']))).toEqual(new Set([id]));
    for (const a of attempts) {
      expect(a.headers['content-type']).toBe('application/json');
      expect(signatureVerifies(a, SECRET)).toBe(true);
      expect(signatureVerifies(a, `${SECRET}x`)).toBe(false);
    }
    // Exponential backoff between attempts, not a tight loop.
    expect(attempts[2].at - attempts[1].at).toBeGreaterThan(attempts[1].at - attempts[0].at);

    const body = attempts[2].json;
    expect(body).toMatchObject({ task_id: id, state: 'SUCCEEDED', metadata: { team: 'payments' }, error: null });
    expect(String(body.start_time)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(String(body.end_time)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(Date.parse(String(body.end_time)) - Date.parse(String(body.start_time))).toBe(body.duration_ms);
    expect(String(body.duration)).toMatch(/^((\d+h)?(\d+m)?\d+(\.\d+)?s|\d+ms)$/); // Go-style, e.g. 1m30.5s or 867ms
  });

  it('does not retry a 400, records the failed delivery, and keeps the migration SUCCEEDED', async () => {
    receiver.answer('/reject', 400, 200);
    const { id } = await stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.b'], callback: { url: `${receiver.url}/reject` } });
    const result = await resultWithin(stack.ferry, id);
    expect(result.state).toBe('SUCCEEDED');
    expect(result.callback?.delivered).toBe(false);
    expect(result.callback?.error).toMatch(/HTTP 400/);
    await new Promise((r) => setTimeout(r, 2500)); // a retry would have come after 1 s
    expect(receiver.to('/reject').map((a) => a.answered)).toEqual([400]);
    expect(receiver.to('/reject')[0].headers['x-ferry-signature']).toBeUndefined();
    expect((await stack.runCli(['result', id])).code).toBe(0);
  });

  it('sends each event as its own webhook with key <id>:<seq>, and one result callback', async () => {
    receiver.answer('/events', 503); // one event's first attempt fails and is retried under the same key
    const { id } = await stack.ferry.start({
      source: 'src',
      target: 'dst',
      tables: ['public.c'],
      callback: { url: `${receiver.url}/events`, secret: 'HOOK_SECRET', events: true },
    });
    const result = await resultWithin(stack.ferry, id);
    expect(result.state).toBe('SUCCEEDED');
    const delivered = await eventually(async () => {
      const ok = receiver.to('/events').filter((d) => d.answered === 200);
      return ok.length >= result.events.length + 1 ? ok : undefined;
    }, 20_000);
    const eventKeys = delivered.filter((d) => d.json.event).map((d) => String(d.headers['idempotency-key']));
    expect(eventKeys.sort()).toEqual(result.events.map((e) => `${id}:${e.seq}`).sort());
    expect(new Set(eventKeys).size).toBe(eventKeys.length);
    const types = delivered.filter((d) => d.json.event).map((d) => (d.json.event as { type: string }).type);
    expect(types).toEqual(expect.arrayContaining(['MigrationStarted', 'TableCopied', 'ValidationPassed', 'MigrationFinished']));
    expect(delivered.every((d) => signatureVerifies(d, SECRET))).toBe(true);
    const final = delivered.filter((d) => d.headers['idempotency-key'] === id);
    expect(final).toHaveLength(1);
    expect(final[0].json.state).toBe('SUCCEEDED');
    // The refused attempt was retried with the key it first carried.
    const refused = receiver.to('/events').find((d) => d.answered === 503)!;
    expect(delivered.some((d) => d.headers['idempotency-key'] === refused.headers['idempotency-key'])).toBe(true);
  });
});
