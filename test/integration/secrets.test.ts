/**
 * Secrets stay out of Temporal (docs/architecture.md §1): connection URLs and callback secrets never enter
 * a history, memo or search attribute; with FERRY_CODEC_KEY every payload is ciphertext that only
 * key holders — the client, the workers, `ferry codec-server` — can read. Checked on the real
 * histories the dev server stores, not on what Ferry says about them.
 */
import { ChildProcess, execFile, spawn } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { createServer, IncomingHttpHeaders, request as httpRequest, Server } from 'node:http';
import { AddressInfo } from 'node:net';
import { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { ApplicationFailure, defaultPayloadConverter } from '@temporalio/common';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { FerryClient } from '../../src/client';
import { AesGcmCodec, dataConverterFromEnv, parseCodecKey } from '../../src/codec';
import { ENCRYPTED_MESSAGE_SUFFIX } from '../../src/failure-converter';
import { PATCHES } from '../../src/core/names';
import { stateQuery } from '../../workflows/definitions';
import { adminUrl, rowsAsText, withClient, withCredentials } from '../helpers/databases';
import { hitsIn, JsonPayload, payloadsIn, unb64 } from '../helpers/history';
import { beforeActivity } from '../helpers/interceptors';
import { eventually, FERRY_BIN } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SOURCE_SCHEMA = `
CREATE TABLE public.zebra_accounts (id int PRIMARY KEY, holder text NOT NULL, balance numeric(12,2));
INSERT INTO public.zebra_accounts SELECT g, 'holder ' || g, g * 1.5 FROM generate_series(1, 3000) g;
CREATE TABLE public.zebra_ledger (id bigint PRIMARY KEY, account int, amount numeric(12,2));
INSERT INTO public.zebra_ledger SELECT g, g % 3000 + 1, g / 7.0 FROM generate_series(1, 5000) g;
ANALYZE;
`;
const TABLES = ['public.zebra_accounts', 'public.zebra_ledger'];
/**
 * The encrypted migration's tables: the ledger in two chunks, so that it is not a small table
 * and signals its milestones to the parent (a small table returns them in its result).
 */
const CODEC_TABLES = ['public.zebra_accounts', { name: 'public.zebra_ledger', chunks: 2 }];

const b64 = (s: string) => Buffer.from(s).toString('base64');

/** Every execution on the stack's task queue (migration, table children, preflight), with its history. */
async function executions(client: Client, taskQueue: string, expected: number): Promise<{ info: WorkflowExecutionInfo; history: string }[]> {
  // Visibility trails the histories a little: wait until every execution shows as closed.
  const infos = await eventually(async () => {
    const found: WorkflowExecutionInfo[] = [];
    for await (const info of client.workflow.list({ query: `TaskQueue = '${taskQueue}'` })) found.push(info);
    return found.length >= expected && found.every((i) => i.closeTime) && found;
  }, 20_000);
  return Promise.all(infos.map(async (info) => ({ info, history: historyToJSON(await client.workflow.getHandle(info.workflowId, info.runId).fetchHistory()) })));
}

/** Records deliveries; answers 200. */
async function startReceiver(): Promise<{ server: Server; url: string; deliveries: { headers: IncomingHttpHeaders; body: string }[] }> {
  const deliveries: { headers: IncomingHttpHeaders; body: string }[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      deliveries.push({ headers: req.headers, body });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/ferry`, deliveries };
}

describe('connection URLs and callback secrets', () => {
  const role = `ferry_secret_${randomBytes(4).toString('hex')}`;
  const password = `pw-${randomBytes(24).toString('base64url')}`;
  const hookSecret = `hook-${randomBytes(24).toString('hex')}`;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let urls: { source: string; target: string };

  const suite = stackSuite({
    name: 'secrets_plain',
    databases: { source: SOURCE_SCHEMA, target: '' },
    // Only connections with credentials: the role below, with its password in the URL.
    connections: {},
    extraEnv: { FERRY_SECRET_HOOK: hookSecret, FERRY_CALLBACK_ALLOW_PRIVATE: 'true' },
    seed: async () => {
      // Local PostgreSQL trusts 127.0.0.1, so the password is never checked; it only has to be in the URL.
      await withClient(adminUrl(), (c) => c.query(`CREATE ROLE "${role}" LOGIN SUPERUSER PASSWORD '${password}'`));
      receiver = await startReceiver();
    },
    connectionUrls: (dbs) => {
      urls = { source: withCredentials(dbs.url('source'), role, password), target: withCredentials(dbs.url('target'), role, password) };
      return { legacy: urls.source, v2: urls.target };
    },
    cleanup: async () => {
      await new Promise((r) => receiver?.server.close(r));
    },
    afterDrop: async () => {
      await withClient(adminUrl(), (c) => c.query(`DROP ROLE IF EXISTS "${role}"`));
    },
  });

  it('never appear in any history, memo or search attribute of the migration, its tables or its preflight', async () => {
    const id = `secrets-plain-${randomBytes(3).toString('hex')}`;
    const spec = { source: 'legacy', target: 'v2', tables: TABLES, batchRows: 1000, callback: { url: receiver.url, secret: 'FERRY_SECRET_HOOK', events: true } };
    await suite.stack.ferry.start(spec, { id });
    const result = await suite.stack.ferry.result(id);
    expect(result.error).toBeNull();
    expect(result.state).toBe('SUCCEEDED');

    // The workers really used the password-bearing URLs (the tables they created belong to the role)
    // and really signed with the secret.
    for (const table of TABLES) expect(await rowsAsText(suite.dbs, 'target', table, 'id')).toEqual(await rowsAsText(suite.dbs, 'source', table, 'id'));
    const owners = await suite.dbs.query<{ tableowner: string }>('target', `SELECT DISTINCT tableowner FROM pg_tables WHERE tablename LIKE 'zebra%'`);
    expect(owners).toEqual([{ tableowner: role }]);
    const final = receiver.deliveries.find((d) => d.headers['idempotency-key'] === id);
    expect(final).toBeDefined();
    const [, t, mac] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(final?.headers['x-ferry-signature'])) ?? [];
    expect(mac).toBe(createHmac('sha256', hookSecret).update(`${t}.${final?.body}`).digest('hex'));

    const runs = await executions(suite.stack.client, suite.stack.taskQueue, 4);
    expect(runs.map((r) => r.info.type).sort()).toEqual(['migrationWorkflow', 'preflightWorkflow', 'tableMigrationWorkflow', 'tableMigrationWorkflow']);
    const corpus: string[] = [];
    for (const { info, history } of runs) {
      corpus.push(history);
      // Payload data is base64 in the JSON: read it decoded too.
      for (const { payload } of payloadsIn(JSON.parse(history), info.workflowId)) corpus.push(unb64(payload.data));
      const d = await suite.stack.client.workflow.getHandle(info.workflowId, info.runId).describe();
      corpus.push(JSON.stringify(d.memo ?? {}), JSON.stringify(d.searchAttributes), JSON.stringify(d.typedSearchAttributes));
      corpus.push(JSON.stringify(d.raw.executionConfig ?? {}), JSON.stringify(d.raw.workflowExecutionInfo?.memo ?? {}));
    }
    const text = corpus.join('\n');
    // What is meant to be there is there: names, never values — so the search below reads real data.
    expect(text).toContain('"source":"legacy"');
    expect(text).toContain('public.zebra_ledger');
    expect(text).toContain('FERRY_SECRET_HOOK');
    expect(text).toContain(receiver.url);
    expect(hitsIn(text, { password, 'source URL': urls.source, 'target URL': urls.target, 'callback secret': hookSecret })).toEqual([]);
  });
});

describe('payload encryption (FERRY_CODEC_KEY)', () => {
  const key = randomBytes(32).toString('base64');
  const keyId = parseCodecKey(key).id;
  let migrationId: string;
  let failedId: string;
  let startInput: JsonPayload[];
  const codecServers: ChildProcess[] = [];

  /** `ferry codec-server --port 0 …` as its own process; resolves with its URL once it listens. */
  async function codecServer(env: Record<string, string>, args: string[] = []): Promise<{ url: string; process: ChildProcess }> {
    const child = spawn(process.execPath, [FERRY_BIN, 'codec-server', '--port', '0', ...args], { env: { ...suite.stack.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    codecServers.push(child);
    let output = '';
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`codec-server did not start: ${output}`)), 30_000);
      const onData = (d: Buffer) => {
        output += d;
        const m = /codec server on (http:\/\/\S+)/.exec(output);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', onData);
      child.on('exit', (code) => reject(new Error(`codec-server exited ${code}: ${output}`)));
    });
    return { url, process: child };
  }

  const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-namespace': 'default', ...headers }, body: JSON.stringify(body) });

  const suite = stackSuite({
    name: 'secrets_codec',
    databases: { source: SOURCE_SCHEMA, target: '' },
    connections: { vault_src: 'source', vault_dst: 'target' },
    extraEnv: { FERRY_CODEC_KEY: key },
    cleanup: async () => {
      for (const child of codecServers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  });

  it('encrypts every payload of the migration while the client and `ferry status` still read its state', async () => {
    migrationId = `secrets-codec-${randomBytes(3).toString('hex')}`;
    await suite.stack.ferry.start({ source: 'vault_src', target: 'vault_dst', tables: CODEC_TABLES, batchRows: 1000, metadata: { team: 'zebra-team' } }, { id: migrationId });
    const result = await suite.stack.ferry.result(migrationId);
    expect(result.state).toBe('SUCCEEDED');
    for (const table of TABLES) expect(await rowsAsText(suite.dbs, 'target', table, 'id')).toEqual(await rowsAsText(suite.dbs, 'source', table, 'id'));

    const runs = await executions(suite.stack.client, suite.stack.taskQueue, 4);
    expect(runs.map((r) => r.info.type).sort()).toEqual(['migrationWorkflow', 'preflightWorkflow', 'tableMigrationWorkflow', 'tableMigrationWorkflow']);
    const found = runs.flatMap(({ info, history }) => payloadsIn(JSON.parse(history), info.workflowId));
    // Search attributes are indexed by the server and never encrypted (FerrySource/FerryTarget are
    // names); nor are patch markers, which the SDK's core writes and which name only the patch.
    const markers = found.filter((p) => p.path.includes('markerRecordedEventAttributes.details.patch-data'));
    const patchIds = markers.map((p) => JSON.parse(unb64(p.payload.data)).id as string);
    expect(patchIds.length).toBeGreaterThan(0);
    for (const id of patchIds) expect(Object.values(PATCHES)).toContain(id);
    const payloads = found.filter((p) => !p.path.includes('searchAttributes') && !markers.includes(p));
    const kinds = new Set(payloads.map((p) => p.path.replace(/^events\[\d+\]\./, '').replace(/\[\d+\]|\.payloads|\.fields\.\w+/g, '')));
    for (const kind of [
      'workflowExecutionStartedEventAttributes.input',
      'workflowExecutionStartedEventAttributes.memo',
      'activityTaskScheduledEventAttributes.input',
      'activityTaskCompletedEventAttributes.result',
      'workflowExecutionSignaledEventAttributes.input',
      'startChildWorkflowExecutionInitiatedEventAttributes.input',
      'childWorkflowExecutionCompletedEventAttributes.result',
      'workflowExecutionCompletedEventAttributes.result',
    ]) {
      expect([...kinds]).toContain(kind);
    }
    const notEncrypted = payloads.filter((p) => unb64(p.payload.metadata?.encoding) !== 'binary/encrypted' || unb64(p.payload.metadata?.['encryption-key-id']) !== keyId);
    expect(notEncrypted.map((p) => `${p.workflowId} ${p.path} ${unb64(p.payload.metadata?.encoding)}`)).toEqual([]);
    const leaks = payloads.filter((p) => /zebra|vault_src|vault_dst/.test(Buffer.from(p.payload.data ?? '', 'base64').toString('latin1')));
    expect(leaks.map((p) => `${p.workflowId} ${p.path}`)).toEqual([]);
    const migration = runs.find((r) => r.info.type === 'migrationWorkflow');
    startInput = JSON.parse(migration?.history ?? '{}').events[0].workflowExecutionStartedEventAttributes.input.payloads;

    // Holders of the key read everything: the query result, the status document, the CLI.
    const state = await suite.stack.client.workflow.getHandle(migrationId).query(stateQuery);
    expect(state.tables.map((t) => t.source)).toEqual(TABLES);
    const status = await suite.stack.ferry.status(migrationId);
    expect([status.state, status.phase]).toEqual(['SUCCEEDED', 'COMPLETED']);
    const cli = await suite.stack.runCli(['status', migrationId, '--json']);
    expect({ code: cli.code, stderr: cli.stderr }).toMatchObject({ code: 0 });
    expect(JSON.parse(cli.stdout).tables.map((t: { source: string }) => t.source)).toEqual(TABLES);
    const { memo } = await suite.stack.client.workflow.getHandle(migrationId).describe();
    expect(memo?.source).toBe('vault_src');
  });

  it('leaves a client without the key, or with another key, unable to read anything', async () => {
    const plain = new Client({ connection: suite.stack.connection, namespace: suite.stack.server.namespace });
    const history = await plain.workflow.getHandle(migrationId).fetchHistory();
    const input = history.events?.[0].workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
    expect(Buffer.from(input?.metadata?.encoding ?? []).toString()).toBe('binary/encrypted');
    expect(Buffer.from(input?.data ?? []).toString('latin1')).not.toMatch(/zebra|vault/);
    expect(() => defaultPayloadConverter.fromPayload(input ?? {})).toThrow(/binary\/encrypted/);
    await expect(plain.workflow.getHandle(migrationId).query(stateQuery)).rejects.toThrow(/binary\/encrypted/);

    const otherKey = randomBytes(32).toString('hex');
    const wrong = new Client({ connection: suite.stack.connection, namespace: suite.stack.server.namespace, dataConverter: dataConverterFromEnv({ FERRY_CODEC_KEY: otherKey }) });
    await expect(wrong.workflow.getHandle(migrationId).query(stateQuery)).rejects.toThrow(new RegExp(`encrypted with key ${keyId}`));

    const cli = await suite.stack.runCli(['status', migrationId, '--json'], { FERRY_CODEC_KEY: '' });
    expect(cli.code).not.toBe(0);
    expect(cli.stdout).not.toMatch(/zebra/);
  });

  it('encrypts failure messages and stack traces too, while key holders still read why it failed', async () => {
    await suite.dbs.exec(
      'source',
      `CREATE TABLE public.zebra_refused (id int PRIMARY KEY, v int);
       INSERT INTO public.zebra_refused SELECT g, g FROM generate_series(1, 200) g;
       UPDATE public.zebra_refused SET v = -1 WHERE id = 150;
       ALTER TABLE public.zebra_refused ADD CONSTRAINT zebra_positive CHECK (v > 0) NOT VALID;`,
    );
    const id = `secrets-codec-failed-${randomBytes(3).toString('hex')}`;
    failedId = id;
    await suite.stack.ferry.start({ source: 'vault_src', target: 'vault_dst', tables: ['public.zebra_refused'] }, { id });
    const result = await suite.stack.ferry.result(id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.cause).toMatch(/zebra_positive/);
    const cli = await suite.stack.runCli(['status', id, '--json']);
    expect(JSON.parse(cli.stdout).error.cause).toMatch(/zebra_positive/);

    // Without the key: every failure in every history of this migration says nothing readable.
    const plain = new Client({ connection: suite.stack.connection, namespace: suite.stack.server.namespace });
    const runs: WorkflowExecutionInfo[] = [];
    for await (const info of suite.stack.client.workflow.list({ query: `WorkflowId STARTS_WITH '${id}'` })) runs.push(info);
    expect(runs.map((r) => r.type).sort()).toEqual(['migrationWorkflow', 'preflightWorkflow', 'tableMigrationWorkflow']);
    const histories = await Promise.all(runs.map(async (r) => historyToJSON(await plain.workflow.getHandle(r.workflowId, r.runId).fetchHistory())));
    const text = histories.join('\n');
    expect(text).toMatch(/activityTaskFailedEventAttributes/); // the copy's failure is in there …
    const messages = [...text.matchAll(/"message":\s*"([^"]*)"/g)].map((m) => m[1]);
    expect(messages.length).toBeGreaterThan(3);
    // … its message moved into a payload; what stays in the clear is what the failure shows anyway (its type, the activity).
    expect(messages.filter((m) => !m.endsWith(`(${ENCRYPTED_MESSAGE_SUFFIX})`))).toEqual([]);
    expect(messages).toContain(`PostgresError.23514 (${ENCRYPTED_MESSAGE_SUFFIX})`);
    expect(text).not.toMatch(/"stackTrace":\s*"[^"]/);
    expect(text).not.toMatch(/zebra|violates check constraint/);
  });

  it('shows key holders the failure through `temporal workflow show --codec-endpoint` and answers `temporal workflow query` through the codec server', async () => {
    const server = await codecServer({ FERRY_CODEC_KEY: key });
    // Asynchronously: the worker that answers the query runs in this process.
    const temporalCli = (args: string[], codec = true) =>
      new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
        const bin = process.env.FERRY_TEMPORAL_BIN ?? 'temporal';
        const all = [...args, '--address', suite.stack.server.address, '--namespace', suite.stack.server.namespace, ...(codec ? ['--codec-endpoint', server.url] : [])];
        execFile(bin, all, { encoding: 'utf8', timeout: 60_000 }, (err, stdout, stderr) =>
          resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        );
      });
    // A query without arguments: the CLI sends the codec server `{}` to encode.
    const query = await temporalCli(['workflow', 'query', '--workflow-id', migrationId, '--type', 'state', '-o', 'json']);
    expect({ status: query.status, stderr: query.stderr }).toEqual({ status: 0, stderr: '' });
    expect(query.stdout).toContain('public.zebra_accounts');

    // The text view prints each failure's message as stored: what failed, and where its text is.
    const show = await temporalCli(['workflow', 'show', '--workflow-id', failedId]);
    expect({ status: show.status, stderr: show.stderr }).toEqual({ status: 0, stderr: '' });
    expect(show.stdout).toContain(`Message: PostgresError.23514 (${ENCRYPTED_MESSAGE_SUFFIX})`);
    expect(show.stdout).toContain(`Message: activity copyChunk failed (${ENCRYPTED_MESSAGE_SUFFIX})`);
    // The JSON view holds the text itself: each failure's encodedAttributes, decrypted by the codec server.
    const json = await temporalCli(['workflow', 'show', '--workflow-id', failedId, '-o', 'json']);
    expect({ status: json.status, stderr: json.stderr }).toEqual({ status: 0, stderr: '' });
    const opened: string[] = [];
    const collect = (value: unknown): void => {
      if (Array.isArray(value)) return value.forEach(collect);
      if (value === null || typeof value !== 'object') return;
      const attrs = (value as { encodedAttributes?: JsonPayload }).encodedAttributes;
      if (attrs) {
        expect(unb64(attrs.metadata?.encoding)).toBe('json/plain');
        opened.push(JSON.parse(unb64(attrs.data)).message);
      }
      Object.values(value).forEach(collect);
    };
    collect(JSON.parse(json.stdout));
    expect(opened).toContain('new row for relation "zebra_refused" violates check constraint "zebra_positive"');
    // Without the codec endpoint the same commands show nothing readable.
    const blind = await temporalCli(['workflow', 'show', '--workflow-id', failedId, '-o', 'json'], false);
    expect(blind.status).toBe(0);
    expect(blind.stdout).not.toMatch(/zebra_positive/);

    server.process.kill('SIGTERM');
    expect(await new Promise((r) => server.process.once('exit', r))).toBe(0);
  });

  it('tells a client without the key which variable to set, and `ferry list` still lists every migration', async () => {
    for (const verb of ['status', 'result']) {
      const run = await suite.stack.runCli([verb, migrationId], { FERRY_CODEC_KEY: '' });
      expect({ verb, code: run.code }).toEqual({ verb, code: 1 });
      expect(run.stderr).toContain('FERRY_CODEC_KEY is not set: set FERRY_CODEC_KEY to the workers\' key');
      expect(run.stderr).not.toContain('Unknown encoding');
      expect(run.stdout).not.toMatch(/zebra/);
    }

    const list = await suite.stack.runCli(['list', '--json'], { FERRY_CODEC_KEY: '' });
    expect({ code: list.code, stderr: list.stderr }).toEqual({ code: 0, stderr: '' });
    const rows = JSON.parse(list.stdout) as { id: string; state: string; rows?: number; error?: unknown; unreadable?: string; source?: string }[];
    const byId = new Map(rows.map((r) => [r.id, r]));
    expect(byId.get(migrationId)).toMatchObject({ state: 'SUCCEEDED', source: 'vault_src', unreadable: expect.stringContaining('set FERRY_CODEC_KEY') });
    expect(byId.get(failedId)).toMatchObject({ state: 'FAILED', unreadable: expect.stringContaining('set FERRY_CODEC_KEY') });
    expect(byId.get(migrationId)?.rows).toBeUndefined();
    expect(list.stdout).not.toMatch(/zebra/);
    const text = await suite.stack.runCli(['list'], { FERRY_CODEC_KEY: '' });
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^${failedId}\\s+FAILED\\s+FAILED\\s+vault_src\\s+vault_dst\\s+\\?\\s+.*\\(encrypted\\)$`, 'm'));
    expect(text.stderr).toMatch(/are encrypted: .*set FERRY_CODEC_KEY/);

    // With the key, the same listing has the rows and the failure.
    const withKey = JSON.parse((await suite.stack.runCli(['list', '--json'])).stdout) as typeof rows;
    expect(withKey.find((r) => r.id === migrationId)).toMatchObject({ rows: 8000 });
    expect(JSON.stringify(withKey.find((r) => r.id === failedId)?.error)).toMatch(/zebra_positive/);
    expect(withKey.every((r) => r.unreadable === undefined)).toBe(true);
  });

  it('decrypts the last error of a retrying activity for RETRYING', async () => {
    const taskQueue = `${suite.stack.taskQueue}-flaky`;
    let failures = 3;
    await suite.stack.startWorker({
      taskQueue,
      interceptors: beforeActivity('prepareTarget', async () => {
        if (failures-- > 0) throw ApplicationFailure.retryable('zebra target is restarting', 'TargetUnavailable');
      }),
    });
    const ferry = FerryClient.fromClient(suite.stack.client, { taskQueue });
    const spec = { source: 'vault_src', target: 'vault_dst', truncate: true, tables: ['public.zebra_accounts'] };
    const { id } = await ferry.start(spec, { id: `secrets-codec-retrying-${randomBytes(3).toString('hex')}`, skipPreflight: true });
    const retrying = await eventually(async () => {
      const s = await ferry.status(id);
      return s.state === 'RETRYING' ? s : undefined;
    }, 30_000);
    expect(retrying.retrying).toMatchObject({ activity: 'prepareTarget', lastError: 'zebra target is restarting' });
    expect((await ferry.result(id)).state).toBe('SUCCEEDED');
  });

  it('serves the codec to the Web UI: decode, encode, CORS, and an HTTP error for the wrong key', async () => {
    const server = await codecServer({ FERRY_CODEC_KEY: key }, ['--cors-origin', 'http://ui.example.test:8080']);

    // The migration's encrypted input decodes back to the spec it was started with.
    const decoded = await post(`${server.url}/decode`, { payloads: startInput });
    expect(decoded.status).toBe(200);
    expect(decoded.headers.get('access-control-allow-origin')).toBe('http://ui.example.test:8080');
    const [spec] = ((await decoded.json()) as { payloads: JsonPayload[] }).payloads;
    expect(unb64(spec.metadata?.encoding)).toBe('json/plain');
    expect(JSON.parse(unb64(spec.data))).toMatchObject({ id: migrationId, source: 'vault_src', target: 'vault_dst', tables: CODEC_TABLES });

    // The browser's preflight before it POSTs.
    const preflight = await fetch(`${server.url}/decode`, {
      method: 'OPTIONS',
      headers: { origin: 'http://ui.example.test:8080', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,x-namespace,authorization' },
    });
    expect(preflight.status).toBeLessThan(300);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('http://ui.example.test:8080');
    expect(preflight.headers.get('access-control-allow-methods')).toMatch(/POST/);
    expect(preflight.headers.get('access-control-allow-headers')?.split(/,\s*/).sort()).toEqual(['authorization', 'content-type', 'x-namespace']);

    // encode → decode round-trips; payloads that were never encrypted pass through untouched.
    const original = { metadata: { encoding: b64('json/plain') }, data: b64('{"hello":"zebra world"}') };
    const encoded = ((await (await post(`${server.url}/encode`, { payloads: [original] })).json()) as { payloads: JsonPayload[] }).payloads;
    expect(unb64(encoded[0].metadata?.encoding)).toBe('binary/encrypted');
    expect(unb64(encoded[0].data)).not.toContain('zebra');
    const back = ((await (await post(`${server.url}/decode`, { payloads: [...encoded, original] })).json()) as { payloads: JsonPayload[] }).payloads;
    expect(back).toEqual([original, original]);

    const malformed = await post(`${server.url}/decode`, { payloads: 'nope' });
    expect(malformed.status).toBe(400);
    // No payloads: `{}` (what Go's JSON makes of an empty list) or no body at all.
    for (const body of [{}, { nope: true }]) {
      const empty = await post(`${server.url}/encode`, body);
      expect({ status: empty.status, body: await empty.json() }).toEqual({ status: 200, body: { payloads: [] } });
    }
    const none = await fetch(`${server.url}/decode`, { method: 'POST', headers: { 'x-namespace': 'default' } });
    expect({ status: none.status, body: await none.json() }).toEqual({ status: 200, body: { payloads: [] } });

    // Another key: an HTTP error that says why, not garbage.
    const other = await codecServer({ FERRY_CODEC_KEY: randomBytes(32).toString('base64') });
    const refused = await post(`${other.url}/decode`, { payloads: startInput });
    expect(refused.status).toBe(422);
    expect(((await refused.json()) as { error: string }).error).toContain(keyId);

    // A malformed key is refused up front, naming the variable and the format.
    const bad = await suite.stack.runCli(['codec-server', '--port', '0'], { FERRY_CODEC_KEY: 'not-a-key' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/FERRY_CODEC_KEY must be 32 random bytes as base64/);

    for (const s of [server, other]) {
      s.process.kill('SIGTERM');
      expect(await new Promise((r) => s.process.once('exit', r))).toBe(0);
    }
  });

  it('answers only requests addressed to where it listens (DNS rebinding), or to names given with --allowed-host', async () => {
    /** POSTs an empty decode with this Host header (fetch cannot set one); resolves with the status. */
    const withHost = (url: string, host: string, method = 'POST') =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${url}/decode`, { method, headers: { host, 'content-type': 'application/json', origin: 'http://localhost:8233' } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
        req.end(method === 'POST' ? JSON.stringify({ payloads: [] }) : undefined);
      });
    const plain = await codecServer({ FERRY_CODEC_KEY: key });
    const port = new URL(plain.url).port;
    // A page on another site whose name now resolves to 127.0.0.1 sends its own name as Host.
    expect(await withHost(plain.url, `rebound.example.test:${port}`)).toBe(421);
    expect(await withHost(plain.url, `rebound.example.test:${port}`, 'OPTIONS')).toBe(421);
    expect(await withHost(plain.url, 'codec.example.test')).toBe(421);
    expect(await withHost(plain.url, 'localhost:1')).toBe(421);
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`, `[::1]:${port}`]) expect({ host, status: await withHost(plain.url, host) }).toEqual({ host, status: 200 });

    // Behind a proxy that forwards its own name: named on the command line, with or without a port.
    const proxied = await codecServer({ FERRY_CODEC_KEY: key }, ['--allowed-host', 'codec.example.test, other.example.test:8443']);
    const proxiedPort = new URL(proxied.url).port;
    for (const host of ['codec.example.test', 'codec.example.test:443', 'other.example.test:8443', `127.0.0.1:${proxiedPort}`]) {
      expect({ host, status: await withHost(proxied.url, host) }).toEqual({ host, status: 200 });
    }
    for (const host of ['other.example.test', 'other.example.test:443', `rebound.example.test:${proxiedPort}`]) {
      expect({ host, status: await withHost(proxied.url, host) }).toEqual({ host, status: 421 });
    }
    for (const s of [plain, proxied]) s.process.kill('SIGTERM');
  });

  it('rotates the key under a running migration: workers restarted with a new FERRY_CODEC_KEY and the old one in FERRY_CODEC_PREVIOUS_KEYS carry it to the end', async () => {
    await suite.dbs.exec('source', `CREATE TABLE public.zebra_rotated (id int PRIMARY KEY, v text);
      INSERT INTO public.zebra_rotated SELECT g, md5(g::text) FROM generate_series(1, 20000) g; ANALYZE public.zebra_rotated;`);
    const [oldKey, newKey] = [randomBytes(32).toString('base64'), randomBytes(32).toString('hex')];
    const [oldId, newId] = [parseCodecKey(oldKey).id, parseCodecKey(newKey).id];
    const taskQueue = `${suite.stack.taskQueue}-rotate`;
    const clientWith = (env: Record<string, string>) =>
      FerryClient.fromClient(new Client({ connection: suite.stack.connection, namespace: suite.stack.server.namespace, dataConverter: dataConverterFromEnv(env) }), { taskQueue });

    // Started, and half copied, under the old key.
    const before = clientWith({ FERRY_CODEC_KEY: oldKey });
    const oldWorker = await suite.stack.startWorker({ taskQueue, env: { FERRY_CODEC_KEY: oldKey } });
    const id = `secrets-rotate-${randomBytes(3).toString('hex')}`;
    await before.start({ source: 'vault_src', target: 'vault_dst', batchRows: 1000, tables: ['public.zebra_rotated'] }, { id });
    await before.throttle(id, { rowsPerSecond: 4000 });
    const copied = async () => (await suite.dbs.query<{ n: number }>('target', 'SELECT count(*)::int AS n FROM public.zebra_rotated').catch(() => [{ n: 0 }]))[0].n;
    await eventually(async () => (await copied()) >= 2000, 30_000);
    oldWorker.shutdown();
    await Promise.all(suite.stack.inProcess.filter((w) => w.worker === oldWorker).map((w) => w.running));

    // Every worker and client of the namespace rotates: the new key seals, the old one still opens.
    const rotated = { FERRY_CODEC_KEY: newKey, FERRY_CODEC_PREVIOUS_KEYS: oldKey };
    await suite.stack.startWorker({ taskQueue, env: rotated });
    const after = clientWith(rotated);
    // (RETRYING while the slice the old worker dropped at shutdown waits for its next attempt.)
    expect(['RUNNING', 'RETRYING']).toContain((await after.status(id)).state);
    await after.throttle(id, { rowsPerSecond: 0 });
    const result = await after.result(id);
    expect(result.state).toBe('SUCCEEDED');
    expect(await rowsAsText(suite.dbs, 'target', 'public.zebra_rotated', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.zebra_rotated', 'id'));

    // The histories hold payloads sealed with each key, and nothing in the clear.
    const plain = new Client({ connection: suite.stack.connection, namespace: suite.stack.server.namespace });
    const found = (
      await Promise.all(
        [id, `${id}/table-0`].map(async (w) => payloadsIn(JSON.parse(historyToJSON(await plain.workflow.getHandle(w).fetchHistory())), w)),
      )
    ).flat();
    // Left out: search attributes and markers (Temporal's own, never encrypted), and the marker the
    // server itself writes when an activity that never started is cancelled (a slice interrupted by
    // the throttle changes; it carries no data: seen once under load).
    const serverMarker = (p: (typeof found)[number]) =>
      p.path.includes('activityTaskCanceledEventAttributes.details') && unb64(p.payload.data as string) === '"ACTIVITY_ID_NOT_STARTED"';
    const sealed = found.filter((p) => !p.path.includes('searchAttributes') && !p.path.includes('markerRecordedEventAttributes') && !serverMarker(p));
    // A payload without a key id is named with its place in the history (what to look for, should it ever appear).
    const unsealed = sealed.filter((p) => !p.payload.metadata?.['encryption-key-id']);
    expect(
      unsealed.map((p) => ({
        workflowId: p.workflowId,
        path: p.path,
        metadata: Object.fromEntries(Object.entries(p.payload.metadata ?? {}).map(([k, v]) => [k, unb64(v as string)])),
        data: unb64(p.payload.data as string).slice(0, 200),
      })),
    ).toEqual([]);
    expect(new Set(sealed.map((p) => unb64(p.payload.metadata?.['encryption-key-id'])))).toEqual(new Set([oldId, newId]));
    expect(sealed.filter((p) => unb64(p.payload.metadata?.encoding) !== 'binary/encrypted')).toEqual([]);
    // Without the previous key, what the old key sealed (the start input) is unreadable.
    const input = sealed.find((p) => p.workflowId === id && p.path.includes('workflowExecutionStartedEventAttributes.input'))!;
    const payload = { metadata: Object.fromEntries(Object.entries(input.payload.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])), data: Buffer.from(input.payload.data ?? '', 'base64') };
    expect(unb64(input.payload.metadata?.['encryption-key-id'])).toBe(oldId);
    await expect(new AesGcmCodec(parseCodecKey(newKey)).decode([payload])).rejects.toThrow(/FERRY_CODEC_PREVIOUS_KEYS/);
    const [opened] = await new AesGcmCodec(parseCodecKey(newKey), [parseCodecKey(oldKey)]).decode([payload]);
    expect(Buffer.from(opened.data ?? []).toString()).toContain('zebra_rotated');
  });

  it('rotates keys: a previous key still opens what it sealed, a hex key equals its base64 form', async () => {
    const oldKey = parseCodecKey(randomBytes(32).toString('hex'));
    const sealed = await new AesGcmCodec(oldKey).encode([{ metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('"zebra"') }]);
    const rotated = new AesGcmCodec(parseCodecKey(randomBytes(32).toString('base64')), [oldKey]);
    const [opened] = await rotated.decode(sealed);
    expect(Buffer.from(opened.data ?? []).toString()).toBe('"zebra"');
    await expect(new AesGcmCodec(parseCodecKey(key)).decode(sealed)).rejects.toThrow(/FERRY_CODEC_PREVIOUS_KEYS/);
    const tampered = Buffer.from(sealed[0].data ?? []);
    tampered[20] ^= 1;
    await expect(rotated.decode([{ ...sealed[0], data: tampered }])).rejects.toThrow(/failed authentication/);
    const raw = randomBytes(32);
    expect(parseCodecKey(raw.toString('hex')).id).toBe(parseCodecKey(raw.toString('base64')).id);
    expect(() => dataConverterFromEnv({ FERRY_CODEC_KEY: raw.toString('base64').slice(0, 40) })).toThrow(/FERRY_CODEC_KEY must be/);
  });
});
