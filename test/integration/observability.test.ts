/**
 * What operators see: a `ferry worker --metrics-port` process serving Ferry's own metrics (checked
 * against row counts in the target database) merged with the Temporal SDK's, /healthz and /readyz,
 * one audit log line per activity task, the SDK's logs in the same JSON stream, and `ferry watch`
 * output when stdout is not a terminal.
 */
import { readFileSync } from 'node:fs';
import { createServer, Server } from 'node:http';
import { AddressInfo } from 'node:net';
import { activityStarts } from '../helpers/history';
import { eventually, resultWithin, RunningProcessWorker } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { freePort } from '../../src/dev/dev-server';

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: r.status, body: await r.text() };
}

/** The value of one sample line of a Prometheus text exposition, or undefined. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const l of text.split('\n')) {
    if (!l.startsWith(`${name}{`) && !l.startsWith(`${name} `)) continue;
    const labelText = l.slice(name.length).split('}')[0];
    if (want.every((w) => labelText.includes(w))) return Number(l.split(' ').pop());
  }
  return undefined;
}

describe('observability', () => {
  let worker: RunningProcessWorker;
  let port: number;
  let receiver: Server;
  let receiverUrl: string;
  let deliveries = 0;

  const suite = stackSuite({
    name: 'observe',
    databases: {
      source: `CREATE TABLE public.readings (id bigint PRIMARY KEY, sensor int NOT NULL, value double precision);
       INSERT INTO public.readings SELECT g, g % 17, g / 3.0 FROM generate_series(1, 30000) g;
       ANALYZE;`,
      target: '',
    },
    connections: { src: 'source', dst: 'target' },
    workers: 0,
    // The receiver is on 127.0.0.1, a target workers refuse unless allowed.
    extraEnv: { FERRY_CALLBACK_ALLOW_PRIVATE: 'true' },
    ready: async (s) => {
      receiver = createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          deliveries += 1;
          res.writeHead(200).end();
        });
      });
      await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
      receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
      port = await freePort();
      worker = await s.stack.startWorkerProcessReady('observed', ['--metrics-port', String(port)]);
    },
    cleanup: async () => {
      receiver?.close();
    },
  });

  it('serves health, readiness and metrics that match the databases, with audit lines per activity task', async () => {
    expect(await get(port, '/healthz')).toEqual({ status: 200, body: 'ok\n' });
    await eventually(async () => (await get(port, '/readyz')).status === 200, 20_000);
    expect((await get(port, '/nope')).status).toBe(404);

    const { id } = await suite.stack.ferry.start({
      source: 'src',
      target: 'dst',
      batchRows: 4000,
      tables: [{ name: 'public.readings', chunks: 2 }],
      callback: { url: receiverUrl },
    });
    const watched = suite.stack.runCli(['watch', id]);
    const watchedJson = suite.stack.runCli(['watch', id, '--json']);
    expect((await resultWithin(suite.stack.ferry, id)).state).toBe('SUCCEEDED');
    await eventually(async () => deliveries >= 1, 20_000);

    const copied = (await suite.dbs.query<{ n: number }>('target', 'SELECT count(*)::int AS n FROM public.readings'))[0].n;
    expect(copied).toBe(30000);
    const metrics = await eventually(async () => {
      const m = (await get(port, '/metrics')).body;
      return sample(m, 'ferry_callbacks_total', { kind: 'result', outcome: 'delivered' }) === 1 ? m : undefined;
    }, 20_000);
    expect(sample(metrics, 'ferry_rows_copied_total', { table: 'public.readings' })).toBe(copied);
    expect(sample(metrics, 'ferry_batches_total', { table: 'public.readings' })).toBeGreaterThanOrEqual(30000 / 4000);
    expect(sample(metrics, 'ferry_bytes_copied_total', { table: 'public.readings' })).toBeGreaterThan(30000 * 8);
    const copyTasks = (await activityStarts(suite.stack.client, `${id}/table-0`)).filter((a) => a.activityType === 'copyChunk').length;
    expect(sample(metrics, 'ferry_activity_duration_seconds_count', { activity: 'copyChunk', outcome: 'completed' })).toBe(copyTasks);
    // The Temporal SDK's own metrics, from the runtime's exporter, on the same endpoint.
    expect(metrics).toMatch(/^temporal_\w+/m);

    const lines = worker
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const audits = lines.filter((l) => l.msg === 'activity completed' && l.activity === 'copyChunk');
    expect(audits).toHaveLength(copyTasks);
    expect(audits[0]).toMatchObject({ migrationId: id, table: 'public.readings', attempt: 1 });
    expect(typeof audits[0].durationMs).toBe('number');
    expect(audits.map((a) => a.chunk).sort()).toEqual(expect.arrayContaining([0, 1]));
    // The SDK's runtime logs arrive in the same JSON stream, marked as the SDK's.
    expect(lines.some((l) => l.sdk === true)).toBe(true);

    // `ferry watch` without a terminal: plain timestamped lines on stderr, the result on stdout.
    const plain = await watched;
    expect(plain.code).toBe(0);
    // Each line: the table's phase, rows and what it is doing: a rate while it copies, words otherwise.
    expect(plain.stderr).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z \S+ · (RUNNING|SUCCEEDED) · \w+ +public\.readings \w+ \d+\/~\d+ ((…|\d+) rows\/s|not started|copied|comparing both sides|done)/m);
    expect(plain.stderr).not.toMatch(/public\.readings (?!FULL_MIGRATING)\w+ \d+\/~\d+ [^ ]+ rows\/s/);
    expect(plain.stderr).toMatch(/ · SUCCEEDED · COMPLETED +public\.readings COMPLETED 30000\/~\d+ done$/m);
    // It closes with the outcome and the rows.
    expect(plain.stderr.trim().split('\n').pop()).toMatch(new RegExp(`^${id} · SUCCEEDED · COMPLETED · \\S+ · 30000 rows$`));
    expect(plain.stderr.includes('\u001b[')).toBe(false); // no terminal escape codes
    expect(plain.stdout).toMatch(/SUCCEEDED/);
    const json = await watchedJson;
    expect(json.code).toBe(0);
    const docs = json.stdout.trim().split('\n').map((l) => JSON.parse(l) as { id?: string; task_id?: string; state: string });
    const result = docs.pop()!;
    expect(result).toMatchObject({ task_id: id, state: 'SUCCEEDED' });
    expect(docs.length).toBeGreaterThanOrEqual(1);
    expect(docs.every((d) => d.id === id)).toBe(true);
  });

  it('runs with two malloc arenas as Ferry starts it, and says so in its log when started without', async () => {
    // The process's own environment, as the kernel holds it, not Ferry's report of it.
    const environ = (pid: number) => readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    expect(environ(worker.process.pid!)).toContain('MALLOC_ARENA_MAX=2');
    const hint = (w: RunningProcessWorker) => w.output().split('\n').some((l) => l.startsWith('{') && /MALLOC_ARENA_MAX is not set/.test(JSON.parse(l).msg));
    expect(hint(worker)).toBe(false);
    const bare = await suite.stack.startWorkerProcessReady('without-arena-setting', [], { MALLOC_ARENA_MAX: '' });
    try {
      expect(environ(bare.process.pid!)).toContain('MALLOC_ARENA_MAX=');
      await eventually(async () => hint(bare), 20_000);
    } finally {
      bare.process.kill('SIGTERM');
      expect(await bare.exited).toBe(0);
    }
  });

  it('exits 0 on SIGTERM and closes its endpoints', async () => {
    worker.process.kill('SIGTERM');
    expect(await worker.exited).toBe(0);
    await expect(get(port, '/readyz')).rejects.toThrow();
  });
});
