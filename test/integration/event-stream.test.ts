/**
 * Events on a NATS JetStream stream, with a real `nats-server -js` the suite starts (installed
 * from Debian when missing) and two `ferry worker` processes that have FERRY_NATS_URL:
 *   - an online migration whose events are all on the stream, in order, each once, though the
 *     NATS server was stopped for 20 s in the middle (pause, resume, approval and the whole
 *     cutover happened meanwhile) and the worker running the retried publish was SIGKILLed;
 *   - read back after the migration ended, by the CLI (`ferry events`, `--type`, `--since`) and
 *     by FerryClient's iterator; `ferry status` and the status document say where events go;
 *   - the migration's result while NATS is still down: its events not yet on the stream are
 *     handed to a publisher workflow of their own, which puts them there once NATS is back;
 *   - a change plan's events on `ferry.change.<id>.<EventType>`;
 *   - preflight refusing `approval: event` that the workers cannot serve.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHmac } from 'node:crypto';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { FerryClient } from '../../src/client';
import { workflowIds } from '../../src/core/names';
import { startNatsServer, NatsServer } from '../../src/dev/nats';
import type { StreamedEvent } from '../../src/core/event-subjects';
import { runningActivities } from '../helpers/chaos';
import { awaitRetry } from '../helpers/kills';
import { expectCleanRun } from '../helpers/repairs';
import { eventually, resultWithin, RunningProcessWorker, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import type { ResultDocument } from '../../src/core/status';

const APPROVAL_KEY = 'approval-key-of-the-pipeline';

const SOURCE = `
CREATE TABLE public.accounts (id int PRIMARY KEY, balance int NOT NULL);
INSERT INTO public.accounts SELECT g, g FROM generate_series(1, 2000) g;
CREATE TABLE public.notes (id int PRIMARY KEY, body text);
INSERT INTO public.notes SELECT g, 'note ' || g FROM generate_series(1, 500) g;
CREATE TABLE public.tags (id int PRIMARY KEY, label text);
INSERT INTO public.tags SELECT g, 'tag ' || g FROM generate_series(1, 300) g;`;

const TABLES = ['public.accounts', 'public.notes'];

describe('events on a NATS JetStream stream', () => {
  let nats: NatsServer;
  const suite = stackSuite({
    name: 'event_stream',
    databases: { source: SOURCE, target: '' },
    workers: 0,
    ready: async () => {
      nats = await startNatsServer();
    },
    cleanup: async () => {
      await nats?.remove();
    },
  });
  // Every worker here caps the stream's size (the variables are applied when it is created).
  const natsEnv = () => ({ FERRY_NATS_URL: nats.url, FERRY_EVENTS_MAX_BYTES: '64M' });
  async function streamConfig(name: string) {
    const nc = await connect({ servers: nats.url });
    try {
      return (await (await jetstreamManager(nc)).streams.info(name)).config;
    } finally {
      await nc.close();
    }
  }
  let result: ResultDocument;
  const id = 'stream-online';

  async function streamed(options: Parameters<FerryClient['events']>[0] = {}): Promise<StreamedEvent[]> {
    const previous = process.env.FERRY_NATS_URL;
    process.env.FERRY_NATS_URL = nats.url;
    try {
      const out: StreamedEvent[] = [];
      for await (const event of suite.stack.ferry.events(options)) out.push(event);
      return out;
    } finally {
      if (previous === undefined) delete process.env.FERRY_NATS_URL;
      else process.env.FERRY_NATS_URL = previous;
    }
  }

  it('refuses approval: event in preflight, exit 2 naming the field, when the workers have no NATS or no key, and starts nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-events-spec-'));
    try {
      const specFile = join(dir, 'approval-event.json');
      const spec = { id: 'stream-refused', source: 'source', target: 'target', mode: 'online', tables: TABLES, cutover: { approval: 'event', approvalSecret: 'FERRY_SECRET_APPROVE', approvalTimeout: '10m' } };
      writeFileSync(specFile, JSON.stringify(spec));
      // A worker without FERRY_NATS_URL could never read the approval.
      const plain = await suite.stack.startWorkerProcessReady('events-plain', [], { FERRY_SECRET_APPROVE: APPROVAL_KEY });
      const noNats = await suite.stack.runCli(['start', specFile]);
      expect([noNats.code, noNats.stderr]).toEqual([2, expect.stringContaining('cutover.approval: event needs the workers to reach NATS: set FERRY_NATS_URL on them')]);
      plain.process.kill('SIGKILL');
      await plain.exited;
      // A worker with NATS but without the key that verifies approvals.
      const keyless = await suite.stack.startWorkerProcessReady('events-keyless', [], natsEnv());
      const noKey = await suite.stack.runCli(['start', specFile]);
      expect([noKey.code, noKey.stderr]).toEqual([2, expect.stringContaining('cutover.approvalSecret: callback secret variable FERRY_SECRET_APPROVE is not set on the workers')]);
      keyless.process.kill('SIGKILL');
      await keyless.exited;
      // Nothing started: no workflow, no capture on the source, no table on the target.
      await expect(suite.stack.ferry.status('stream-refused')).rejects.toThrow();
      expect(await suite.dbs.query('source', `SELECT nspname FROM pg_namespace WHERE nspname LIKE '\\_ferry%'`)).toEqual([]);
      expect(await suite.dbs.query('target', `SELECT to_regclass('public.accounts') AS t`)).toEqual([{ t: null }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);

  it('puts every event of an online migration on the stream in order, each once, across a 20 s NATS outage and a publishing worker SIGKILLed', async () => {
    const workers: RunningProcessWorker[] = [];
    for (const name of ['events-1', 'events-2']) workers.push(await suite.stack.startWorkerProcessReady(name, [], natsEnv()));
    await suite.stack.ferry.start(
      { source: 'source', target: 'target', mode: 'online', tables: TABLES, cutover: { approval: 'manual', approvalTimeout: '10m', afterwards: 'unfreeze' } },
      { id },
    );
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
    // Published as they happen: the stream has the events so far, and the status says where.
    await eventually(async () => (await streamed({ id })).length >= (await suite.stack.ferry.status(id)).events.length, 30_000);
    expect((await suite.stack.ferry.status(id)).eventStream).toEqual({ stream: 'FERRY_EVENTS', subjects: `ferry.migration.${id}.<EventType>` });

    // NATS goes away; the migration carries on: controls, the approval, the whole cutover.
    await nats.stop();
    const stoppedAt = Date.now();
    await suite.stack.ferry.pause(id, { actor: 'tester', reason: 'nats down' });
    await suite.stack.ferry.resume(id, { actor: 'tester' });
    await suite.stack.ferry.approve(id, { actor: 'tester' });
    // The worker whose attempt retries a publish dies; the other takes the next attempt.
    const publishing = await eventually(async () => (await runningActivities(suite.stack.ferry, [id])).find((a) => a.activity === 'publishEvents'), 60_000);
    const victim = workers.find((w) => w.identity === publishing.worker)!;
    victim.process.kill('SIGKILL');
    const killedAt = Date.now();
    await victim.exited;
    workers.push(await suite.stack.startWorkerProcessReady('events-3', [], natsEnv()));
    // Temporal gave the killed publish its next attempt.
    expect((await awaitRetry(suite.stack.ferry, { ...publishing, at: killedAt })).attempt).toBeGreaterThan(publishing.attempt);
    // The migration ends while NATS is down: its result does not wait for the stream (the
    // events still to publish go to a publisher workflow of their own).
    result = await resultWithin(suite.stack.ferry, id, 120_000);
    expect(result.state).toBe('SUCCEEDED');
    await expectCleanRun(suite.stack.ferry, result);
    const publisher = await suite.stack.client.workflow.getHandle(workflowIds.events(id)).describe();
    expect(publisher.status.name).toBe('RUNNING');
    await eventually(async () => Date.now() - stoppedAt >= 20_000, 30_000);
    await nats.start();
    await eventually(async () => (await suite.stack.client.workflow.getHandle(workflowIds.events(id)).describe()).status.name === 'COMPLETED', 120_000);

    // Every event, in order, each once: the stream's messages for this run are the result's events.
    const events = await streamed({ id });
    expect(events.map((e) => e.seq)).toEqual(result.events.map((e) => e.seq));
    expect(events.map(({ seq, type, at, detail }) => ({ seq, type, at, ...(detail ? { detail } : {}) }))).toEqual(
      result.events.map(({ seq, type, at, detail }) => ({ seq, type, at, ...(detail ? { detail } : {}) })),
    );
    expect(events.every((e) => e.id === id && e.kind === 'migration')).toBe(true);
    // Stream sequence numbers rise with the events' own: stored in order.
    expect(events.map((e) => e.streamSeq)).toEqual([...events.map((e) => e.streamSeq!)].sort((a, b) => a - b));
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(['ControlReceived', 'CutoverStarted', 'CutoverCompleted', 'MigrationFinished']));
    // The stream was made with the workers' limits.
    expect(await streamConfig('FERRY_EVENTS')).toMatchObject({ max_bytes: 64 * 1024 ** 2, max_age: 7 * 86_400 * 1e9, max_msgs: -1, num_replicas: 1 });
  }, 420_000);

  it('replays a finished run to a reader that comes afterwards: the CLI by type and by seq, and FerryClient\'s iterator', async () => {
    const all = await streamed({ id });
    expect(all.length).toBe(result.events.length);
    const cli = await suite.stack.runCli(['events', id, '--json'], natsEnv());
    expect(cli.code).toBe(0);
    expect(cli.stdout.trim().split('\n').map((l) => (JSON.parse(l) as StreamedEvent).seq)).toEqual(all.map((e) => e.seq));
    const controls = await suite.stack.runCli(['events', id, '--type', 'ControlReceived', '--type', 'CutoverCompleted', '--json'], natsEnv());
    const typed = controls.stdout.trim().split('\n').map((l) => JSON.parse(l) as StreamedEvent);
    expect(typed.map((e) => e.type)).toEqual(all.filter((e) => e.type === 'ControlReceived' || e.type === 'CutoverCompleted').map((e) => e.type));
    expect(typed.filter((e) => e.type === 'ControlReceived').map((e) => e.detail?.signal)).toEqual(expect.arrayContaining(['pause', 'resume', 'approve']));
    const since = await suite.stack.runCli(['events', id, '--since', String(all.length - 2), '--json'], natsEnv());
    expect(since.stdout.trim().split('\n').map((l) => (JSON.parse(l) as StreamedEvent).seq)).toEqual(all.slice(-3).map((e) => e.seq));
    // People's lines, and where the status says they go.
    const lines = await suite.stack.runCli(['events', id], natsEnv());
    expect(lines.stdout).toMatch(new RegExp(`migration ${id} #1  `));
    const status = await suite.stack.runCli(['status', id]);
    expect(status.stdout).toContain(`events also on the stream FERRY_EVENTS, subjects ferry.migration.${id}.<EventType> (ferry events ${id})`);
  }, 120_000);

  it('puts a change plan\'s events on ferry.change.<id>.<EventType>, in order, each once', async () => {
    const changeId = 'stream-change';
    const { id: started } = await suite.stack.ferry.startChange({
      kind: 'change',
      id: changeId,
      database: 'source',
      steps: [{ sql: 'ALTER TABLE public.tags ADD COLUMN weight int' }, { backfill: { table: 'public.tags', set: { weight: 'id % 7' }, batchRows: 100 } }],
    });
    expect(started).toBe(changeId);
    const changed = await suite.stack.ferry.changeResult(changeId);
    expect(changed.state).toBe('SUCCEEDED');
    // The change itself, read from the database.
    expect(await suite.dbs.query('source', 'SELECT count(*)::int AS n FROM public.tags WHERE weight IS DISTINCT FROM id % 7')).toEqual([{ n: 0 }]);
    const events = await eventually(async () => {
      const read = await streamed({ id: changeId });
      return read.length >= changed.events.length ? read : undefined;
    }, 60_000);
    expect(events.map(({ seq, type, at }) => ({ seq, type, at }))).toEqual(changed.events.map(({ seq, type, at }) => ({ seq, type, at })));
    expect(events.every((e) => e.id === changeId && e.kind === 'change')).toBe(true);
    const lines = await suite.stack.runCli(['events', changeId, '--json'], natsEnv());
    expect(lines.stdout.trim().split('\n').map((l) => (JSON.parse(l) as StreamedEvent).seq)).toEqual(changed.events.map((e) => e.seq));
  }, 180_000);

  it('approves by a signed message on ferry.control.<id>.approve (approval: event), refusing and recording a forged one', async () => {
    // Workers with the key that signs approvals; the earlier ones go.
    for (const w of suite.stack.processes) if (w.process.exitCode === null) w.process.kill('SIGKILL');
    // This worker also limits the stream's messages: applied to the stream that exists.
    await suite.stack.startWorkerProcessReady('events-approver', [], { ...natsEnv(), FERRY_SECRET_APPROVE: APPROVAL_KEY, FERRY_EVENTS_MAX_MESSAGES: '100000' });
    await suite.dbs.exec('target', 'DROP TABLE public.accounts, public.notes');
    const approvalId = 'stream-approval';
    await suite.stack.ferry.start(
      { source: 'source', target: 'target', mode: 'online', tables: TABLES, cutover: { approval: 'event', approvalSecret: 'FERRY_SECRET_APPROVE', approvalTimeout: '10m', afterwards: 'unfreeze' } },
      { id: approvalId },
    );
    await waitForPhase(suite.stack.ferry, approvalId, 'AWAITING_APPROVAL', 120_000);
    const nc = await connect({ servers: nats.url });
    try {
      const js = jetstream(nc);
      const post = (body: string, key: string) => {
        const h = headers();
        const t = Math.floor(Date.now() / 1000);
        h.set('X-Ferry-Signature', `t=${t},v1=${createHmac('sha256', key).update(`${t}.${body}`).digest('hex')}`);
        return js.publish(`ferry.control.${approvalId}.approve`, body, { headers: h });
      };
      // Forged: signed with another key. Refused, on record, and the migration still waits.
      await post(JSON.stringify({ actor: 'mallory', reason: 'ship it' }), 'not-the-key');
      const refused = await eventually(async () =>
        (await suite.stack.ferry.status(approvalId)).transitions.find((t) => t.machine === 'control' && t.signal === 'approve' && t.to === 'refused'),
      );
      expect(refused).toMatchObject({ actor: 'mallory', reason: expect.stringContaining('does not verify') });
      expect((await suite.stack.ferry.status(approvalId)).phase).toBe('AWAITING_APPROVAL');
      // Signed with the key: approved, by whom it names.
      await post(JSON.stringify({ actor: 'pipeline', reason: 'tests green' }), APPROVAL_KEY);
      const approved = await resultWithin(suite.stack.ferry, approvalId, 120_000);
      expect(approved.state).toBe('SUCCEEDED');
      await expectCleanRun(suite.stack.ferry, approved);
      const status = await suite.stack.ferry.status(approvalId);
      expect(status.transitions.filter((t) => t.machine === 'control' && t.signal === 'approve').map((t) => [t.to, 'actor' in t ? t.actor : undefined])).toEqual([
        ['refused', 'mallory'],
        ['approved', 'pipeline'],
      ]);
      expect(status.warnings).toEqual(expect.arrayContaining([expect.stringContaining('refused an approval message claiming to be from mallory')]));
      expect(await streamConfig('FERRY_EVENTS')).toMatchObject({ max_msgs: 100_000, max_bytes: 64 * 1024 ** 2 });
    } finally {
      await nc.close();
    }
  }, 300_000);

  it('refuses a bad --type or --since with exit 2 naming the option, and says what to set without FERRY_NATS_URL', async () => {
    const badType = await suite.stack.runCli(['events', id, '--type', 'Exploded'], natsEnv());
    expect([badType.code, badType.stderr]).toEqual([2, expect.stringContaining("option '--type <type>' argument 'Exploded' is invalid")]);
    const badSince = await suite.stack.runCli(['events', id, '--since', 'yesterday'], natsEnv());
    expect([badSince.code, badSince.stderr]).toEqual([2, expect.stringContaining('must be a duration back from now')]);
    // A worker with a limit it cannot use does not start.
    const badLimit = await suite.stack.runCli(['worker'], { ...natsEnv(), FERRY_EVENTS_REPLICAS: '9' }, 60_000);
    expect([badLimit.code, badLimit.stderr]).toEqual([2, expect.stringContaining('FERRY_EVENTS_REPLICAS=9: JetStream keeps 1 to 5 replicas')]);
    const unset = await suite.stack.runCli(['events', id], { FERRY_NATS_URL: '' });
    expect([unset.code, unset.stderr]).toEqual([2, expect.stringContaining('FERRY_NATS_URL is not set')]);
  });
});
