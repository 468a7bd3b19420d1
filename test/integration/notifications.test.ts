/**
 * Result callbacks and event webhooks against a real HTTP receiver (docs/architecture.md §9): retried on
 * 5xx with the same Idempotency-Key and a signature that verifies, not retried on other 4xx, a
 * failed delivery recorded in the result without changing the migration's outcome. And what a
 * spec must not make the workers do (issue 12): sign with a variable outside FERRY_SECRET_*,
 * follow a redirect, reach a loopback, link-local or private address unless the workers allow it
 * (FERRY_CALLBACK_ALLOW_PRIVATE=true, which the receivers here on 127.0.0.1 need), or report
 * back why a connection failed.
 */
import { randomBytes } from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { createSendCallback } from '../../activities/callback';
import { silentLogger } from '../../src/logger';
import { MIGRATION_WORKFLOW } from '../../src/core/names';
import { freePort } from '../../src/dev/dev-server';
import { FerryClient } from '../../src/client';
import { activityStarts } from '../helpers/history';
import { Receiver, signatureVerifies } from '../helpers/receiver';
import { eventually, resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SECRET = randomBytes(24).toString('hex');
const ALLOW_PRIVATE = { FERRY_CALLBACK_ALLOW_PRIVATE: 'true' };

/** What the activity threw, as the worker hands it to Temporal. */
async function failureOf(promise: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof ApplicationFailure)) throw new Error(`expected an ApplicationFailure, got ${String(err)}`);
  return err;
}

/** A failure's message and every cause's message, as they would reach a history. */
function chainText(err: unknown): string {
  const parts: string[] = [];
  for (let e = err as { message?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e) parts.push(String(e.message));
  return parts.join(' <- ');
}

describe('callbacks', () => {
  let receiver: Receiver;

  const suite = stackSuite({
    name: 'notify',
    databases: {
      source: `CREATE TABLE public.a (id int PRIMARY KEY, v text);
       INSERT INTO public.a SELECT g, 'v' || g FROM generate_series(1, 500) g;
       CREATE TABLE public.b (id int PRIMARY KEY, v text);
       INSERT INTO public.b SELECT g, 'v' || g FROM generate_series(1, 500) g;
       CREATE TABLE public.c (id int PRIMARY KEY, v text);
       INSERT INTO public.c SELECT g, 'v' || g FROM generate_series(1, 500) g;
       CREATE TABLE public.d (id int PRIMARY KEY, v text);
       INSERT INTO public.d SELECT g, 'v' || g FROM generate_series(1, 50) g;`,
      target: '',
    },
    connections: { src: 'source', dst: 'target' },
    extraEnv: { FERRY_SECRET_HOOK: SECRET, ...ALLOW_PRIVATE },
    ready: async (s) => {
      receiver = await Receiver.start();
      // A second pool on its own task queue, as workers are by default: private targets refused.
      await s.stack.startWorker({ taskQueue: strictQueue(), env: { FERRY_CALLBACK_ALLOW_PRIVATE: undefined } });
    },
    cleanup: async () => {
      await receiver?.close();
    },
  });
  const strictQueue = () => `${suite.stack.taskQueue}-strict`;

  it('retries a result callback after 500, 500 until 200: one delivery, one key, signed every time', async () => {
    receiver.answer('/retry', 500, 500, 200);
    const { id } = await suite.stack.ferry.start({
      source: 'src',
      target: 'dst',
      tables: ['public.a'],
      metadata: { team: 'payments' },
      callback: { url: `${receiver.url}/retry`, secret: 'FERRY_SECRET_HOOK' },
    });
    const result = await resultWithin(suite.stack.ferry, id);
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
    // The backoff docs/operating.md gives (Callbacks): the first retry after 1 s, the next after twice that (as the
    // receiver's clock sees the requests arrive: a few milliseconds either way).
    expect(attempts[1].at - attempts[0].at).toBeGreaterThanOrEqual(1000 - 50);
    expect(attempts[2].at - attempts[1].at).toBeGreaterThanOrEqual(2000 - 50);
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
    const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.b'], callback: { url: `${receiver.url}/reject` } });
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('SUCCEEDED');
    expect(result.callback?.delivered).toBe(false);
    expect(result.callback?.error).toMatch(/HTTP 400/);
    // The migration has ended, so no retry can come any more: one attempt, in the history too.
    const starts = (await activityStarts(suite.stack.client, id)).filter((s) => s.activityType === 'sendCallback');
    expect(starts.map((s) => s.attempt)).toEqual([1]);
    expect(receiver.to('/reject').map((a) => a.answered)).toEqual([400]);
    expect(receiver.to('/reject')[0].headers['x-ferry-signature']).toBeUndefined();
    expect((await suite.stack.runCli(['result', id])).code).toBe(0);
  });

  it('sends each event as its own webhook with key <id>:<seq>, and one result callback', async () => {
    receiver.answer('/events', 503); // one event's first attempt fails and is retried under the same key
    const { id } = await suite.stack.ferry.start({
      source: 'src',
      target: 'dst',
      tables: ['public.c'],
      callback: { url: `${receiver.url}/events`, secret: 'FERRY_SECRET_HOOK', events: true },
    });
    const result = await resultWithin(suite.stack.ferry, id);
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

  it('does not follow a redirect: the 302 is final, names the status, and where it points receives nothing', async () => {
    const elsewhere = await Receiver.start();
    try {
      receiver.redirect('/moved', `${elsewhere.url}/elsewhere`);
      const { id } = await suite.stack.ferry.start({
        source: 'src',
        target: 'dst',
        tables: [{ name: 'public.d', target: 'redirected.d' }],
        callback: { url: `${receiver.url}/moved`, secret: 'FERRY_SECRET_HOOK' },
      });
      const result = await resultWithin(suite.stack.ferry, id);
      expect(result.state).toBe('SUCCEEDED');
      expect(result.callback).toEqual({ delivered: false, error: expect.stringMatching(/HTTP 302/) });
      expect(receiver.to('/moved').map((d) => d.answered)).toEqual([302]);
      expect(elsewhere.deliveries).toEqual([]);
      const starts = (await activityStarts(suite.stack.client, id)).filter((s) => s.activityType === 'sendCallback');
      expect(starts.map((s) => s.attempt)).toEqual([1]);
    } finally {
      await elsewhere.close();
    }
  });

  it('refuses in the workflow too a spec that another client started with a secret outside FERRY_SECRET_*', async () => {
    const handle = await suite.stack.client.workflow.start(MIGRATION_WORKFLOW, {
      taskQueue: suite.stack.taskQueue,
      workflowId: `other-client-${randomBytes(3).toString('hex')}`,
      args: [{ source: 'src', target: 'dst', tables: ['public.d'], callback: { url: `${receiver.url}/other-client`, secret: 'FERRY_CONN_SRC' } }],
    });
    const err = await handle.result().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WorkflowFailedError);
    const cause = (err as WorkflowFailedError).cause as ApplicationFailure;
    expect(cause.type).toBe('InvalidSpec');
    expect(cause.message).toMatch(/callback\.secret: must be the name of a workers' environment variable that starts with FERRY_SECRET_/);
    expect(receiver.to('/other-client')).toEqual([]);
  });

  it('refuses 127.0.0.1, 169.254.169.254 and a name that resolves to loopback on workers without FERRY_CALLBACK_ALLOW_PRIVATE, once, saying how to allow them', async () => {
    const strict = FerryClient.fromClient(suite.stack.client, { taskQueue: strictQueue() });
    const urls = {
      loopback: `${receiver.url}/loopback`,
      metadata: 'http://169.254.169.254/latest/meta-data/',
      named: `http://localhost:${receiver.port}/named`,
    };
    const runs = await Promise.all(
      Object.entries(urls).map(async ([name, url]) => {
        const { id } = await strict.start({
          source: 'src',
          target: 'dst',
          tables: [{ name: 'public.d', target: `refused_${name}.d` }], // own schemas: index names repeat
          callback: { url, secret: 'FERRY_SECRET_HOOK' },
        });
        return { name, id, result: await resultWithin(strict, id, 60_000) };
      }),
    );
    for (const { name, id, result } of runs) {
      expect({ name, state: result.state, callback: result.callback, error: result.error }).toEqual({
        error: null,
        name,
        state: 'SUCCEEDED',
        callback: { delivered: false, error: expect.stringMatching(/FERRY_CALLBACK_ALLOW_PRIVATE=true/) },
      });
      // No address, no port: a refusal says what kind of target it was, not where it leads.
      expect(result.callback?.error).not.toMatch(/127\.0\.0\.1|169\.254|::1|localhost/);
      expect(result.callback?.error).not.toContain(String(receiver.port));
      const starts = (await activityStarts(suite.stack.client, id)).filter((s) => s.activityType === 'sendCallback');
      expect({ name, attempts: starts.map((s) => s.attempt) }).toEqual({ name, attempts: [1] });
    }
    expect(receiver.to('/loopback')).toEqual([]);
    expect(receiver.to('/named')).toEqual([]);
  });
});

describe('sendCallback on the worker', () => {
  let receiver: Receiver;
  const body = { task_id: 'm-1', state: 'SUCCEEDED' };

  beforeAll(async () => {
    receiver = await Receiver.start();
  });

  afterAll(async () => {
    await receiver?.close();
  });

  it('refuses every loopback, private and link-local form, literal or resolved, before connecting', async () => {
    const send = createSendCallback({ env: {}, logger: silentLogger() });
    const port = receiver.port;
    const urls = [
      `http://127.0.0.1:${port}/refused`,
      `http://127.1.2.3:${port}/refused`,
      `http://[::1]:${port}/refused`,
      `http://[::ffff:127.0.0.1]:${port}/refused`,
      `http://0.0.0.0:${port}/refused`,
      `http://localhost:${port}/refused`,
      'http://10.1.2.3/refused',
      'http://172.16.0.1/refused',
      'http://192.168.1.1/refused',
      'http://100.64.0.1/refused',
      'http://169.254.169.254/latest/meta-data/',
      'http://[fe80::1]/refused',
      'http://[fd12:3456::1]/refused',
      'http://[::ffff:a9fe:a9fe]/refused',
    ];
    for (const url of urls) {
      const failure = await failureOf(send({ url, idempotencyKey: 'm-1', body }));
      expect({ url, type: failure.type, nonRetryable: failure.nonRetryable }).toEqual({ url, type: 'CallbackTargetRefused', nonRetryable: true });
      expect(failure.message).toMatch(/set FERRY_CALLBACK_ALLOW_PRIVATE=true on the workers/);
      expect(failure.cause).toBeUndefined();
    }
    expect(receiver.to('/refused')).toEqual([]);

    // The same worker with the variable set delivers to the loopback receiver: the refusal above was the rule, not a broken request.
    const allowed = createSendCallback({ env: ALLOW_PRIVATE, logger: silentLogger() });
    await expect(allowed({ url: `http://localhost:${port}/allowed`, idempotencyKey: 'm-1', body })).resolves.toEqual({ status: 200 });
    expect(receiver.to('/allowed')).toHaveLength(1);
  });

  it('connects to the address it checked instead of resolving the name again (DNS rebinding)', async () => {
    // A second receiver on another loopback address and the same port: where a re-resolved name would lead.
    const rebound = await Receiver.start({ host: '127.0.0.2', port: receiver.port });
    try {
      const answers = [[{ address: '127.0.0.1', family: 4 }], [{ address: '127.0.0.2', family: 4 }]];
      const asked: string[] = [];
      const resolve = async (host: string) => {
        asked.push(host);
        return answers[Math.min(asked.length - 1, 1)];
      };
      const send = createSendCallback({ env: ALLOW_PRIVATE, logger: silentLogger(), resolve });
      await expect(send({ url: `http://hooks.rebind.test:${receiver.port}/pinned`, idempotencyKey: 'm-1', body })).resolves.toEqual({ status: 200 });
      expect(asked).toEqual(['hooks.rebind.test']);
      expect(receiver.to('/pinned')).toHaveLength(1);
      expect(receiver.to('/pinned')[0].headers.host).toBe(`hooks.rebind.test:${receiver.port}`);
      expect(rebound.deliveries).toEqual([]);
    } finally {
      await rebound.close();
    }
  });

  it('reports a failed connection without its address, port or system error, as retryable', async () => {
    const closed = await freePort();
    const send = createSendCallback({ env: ALLOW_PRIVATE, logger: silentLogger() });
    const failure = await failureOf(send({ url: `http://127.0.0.1:${closed}/down`, idempotencyKey: 'm-1', body }));
    expect(failure.message).toBe('callback delivery failed (network error)');
    expect(failure.nonRetryable).toBe(false);
    const text = chainText(failure);
    expect(text).not.toContain(String(closed));
    expect(text).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|connect/);
  });

  it('signs only with FERRY_SECRET_* variables, never FERRY_CONN_* or TEMPORAL_API_KEY', async () => {
    const env = {
      ...ALLOW_PRIVATE,
      FERRY_CONN_X: 'postgres://ferry:hunter2@db.internal/app',
      TEMPORAL_API_KEY: 'temporal-api-key-value',
      FERRY_SECRET_HOOK: SECRET,
    };
    const send = createSendCallback({ env, logger: silentLogger() });
    for (const secret of ['FERRY_CONN_X', 'TEMPORAL_API_KEY']) {
      const failure = await failureOf(send({ url: `${receiver.url}/oracle`, secret, idempotencyKey: 'm-1', body }));
      expect({ secret, type: failure.type, nonRetryable: failure.nonRetryable }).toEqual({ secret, type: 'CallbackSecretRefused', nonRetryable: true });
      expect(failure.message).toMatch(/FERRY_SECRET_/);
      expect(failure.message).not.toMatch(/hunter2|temporal-api-key-value/);
    }
    expect(receiver.to('/oracle')).toEqual([]);
    await expect(send({ url: `${receiver.url}/signed`, secret: 'FERRY_SECRET_HOOK', idempotencyKey: 'm-1', body })).resolves.toEqual({ status: 200 });
    expect(signatureVerifies(receiver.to('/signed')[0], SECRET)).toBe(true);
  });
});
