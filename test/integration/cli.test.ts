/**
 * The `ferry` command line as an operator uses it: real processes, real exit codes, against a
 * dev server, a worker and two PostgreSQL databases.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import { Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { freePort } from '../../src/dev/dev-server';
import { adminUrl, objectInventory, rowsAsText, withClient, withCredentials } from '../helpers/databases';
import { eventually, FERRY_BIN, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

/** A ferry command on a pseudo-terminal of 120 columns (util-linux `script`), its output read as it comes. */
function onTerminal(env: NodeJS.ProcessEnv, args: string[]) {
  const command = `stty cols 120 rows 40; ${[process.execPath, FERRY_BIN, ...args].map((a) => `'${a}'`).join(' ')}`;
  const child = spawn('script', ['-qefc', command, '/dev/null'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { output: () => stripVTControlCharacters(output), exited, child };
}

describe('the ferry CLI', () => {
  // A role that may read the target but not write as a replica there.
  const role = `ferry_cli_${randomBytes(3).toString('hex')}`;
  const dir = mkdtempSync(join(tmpdir(), 'ferry-cli-'));
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };

  const suite = stackSuite({
    name: 'cli',
    databases: {
      source: `CREATE TABLE public.customers (id int PRIMARY KEY, name text NOT NULL, email text UNIQUE);
      INSERT INTO public.customers SELECT g, 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 2500) g;
      CREATE TABLE public.keyless (v int);`,
      target: '',
    },
    connections: { legacy: 'source', v2: 'target' },
    seed: async () => {
      await withClient(adminUrl(), (c) => c.query(`CREATE ROLE ${role} LOGIN`));
    },
    connectionUrls: (dbs) => ({ limited: withCredentials(dbs.url('target'), role) }),
    afterDrop: async () => {
      await withClient(adminUrl(), (c) => c.query(`DROP ROLE IF EXISTS ${role}`));
    },
  });

  it('start --wait migrates, exits 0, and status/result/list report it', async () => {
    const spec = file('ok.yaml', 'id: cli-ok\nsource: legacy\ntarget: v2\nbatchRows: 1000\ntables:\n  - public.customers\n');
    const run = await suite.stack.runCli(['start', spec, '--wait', '--reason', 'move to v2']);
    expect(run.stderr).toContain('migration cli-ok started');
    expect(run.stdout).toMatch(/migration cli-ok SUCCEEDED in .* \(2500 rows\)/);
    expect(run.code).toBe(0);
    expect(await rowsAsText(suite.dbs, 'target', 'public.customers', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.customers', 'id'));

    const status = await suite.stack.runCli(['status', 'cli-ok', '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ id: 'cli-ok', state: 'SUCCEEDED', phase: 'COMPLETED', tables: [{ source: 'public.customers', rowsCopied: 2500 }] });

    const result = await suite.stack.runCli(['result', 'cli-ok', '--json']);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ task_id: 'cli-ok', state: 'SUCCEEDED', rowsCopied: 2500, error: null });
    // Who started it (the OS user, as no --actor was given) and why: a start control on record.
    expect(JSON.parse(result.stdout).controls).toEqual([
      { machine: 'control', signal: 'start', from: 'none', to: 'queued', actor: userInfo().username, reason: 'move to v2', at: expect.any(String) },
    ]);

    const list = await suite.stack.runCli(['list', '--json']);
    expect(JSON.parse(list.stdout)).toEqual([
      expect.objectContaining({ id: 'cli-ok', kind: 'migration', state: 'SUCCEEDED', phase: 'COMPLETED', source: 'legacy', target: 'v2', rows: 2500 }),
    ]);
    const failed = await suite.stack.runCli(['list', '--state', 'FAILED', '--json']);
    expect(JSON.parse(failed.stdout)).toEqual([]);
    const text = await suite.stack.runCli(['list']);
    expect(text.code).toBe(0);
    const [header, row, ...rest] = text.stdout.trimEnd().split('\n');
    expect(header.split(/\s{2,}/)).toEqual(['ID', 'STATE', 'PHASE', 'SOURCE', 'TARGET', 'ROWS', 'STARTED', 'ENDED', 'ERROR']);
    expect(row.split(/\s{2,}/).slice(0, 6)).toEqual(['cli-ok', 'SUCCEEDED', 'COMPLETED', 'legacy', 'v2', '2500']);
    expect(rest).toEqual([]);
    // Columns line up: each header starts where its values start.
    expect(row.indexOf('legacy')).toBe(header.indexOf('SOURCE'));
  });

  it('exits 2 and starts nothing for an invalid spec, naming the field', async () => {
    const spec = file('bad.yaml', 'source: legacy\ntarget: v2\ntables: [customers]\nbatchRows: 0\nturbo: true\n');
    const run = await suite.stack.runCli(['start', spec]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('tables[0]: must be qualified as schema.table');
    expect(run.stderr).toContain('batchRows: Too small');
    expect(run.stderr).toContain('unknown key "turbo"');
    const validate = await suite.stack.runCli(['validate', spec]);
    expect(validate.code).toBe(2);
  });

  it('exits 2 for a preflight refusal and leaves both databases as they were', async () => {
    const before = [await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')];
    const spec = file('keyless.yaml', 'id: cli-keyless\nsource: legacy\ntarget: v2\nmode: online\ntables: [public.keyless]\n');
    const run = await suite.stack.runCli(['start', spec]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('refused (NoPrimaryKey)');
    expect(run.stderr).toContain('table public.keyless has no primary key');
    expect((await suite.stack.runCli(['status', 'cli-keyless'])).code).toBe(1);
    expect([await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')]).toEqual(before);
    const unknown = await suite.stack.runCli(['start', file('conn.yaml', 'source: legacy\ntarget: nowhere\ntables: [public.customers]\n')]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('connection "nowhere" is not configured on the workers: set FERRY_CONN_NOWHERE');
  });

  it('validate --connect runs preflight through the workers and prints the plan', async () => {
    const spec = file('plan.yaml', 'source: legacy\ntarget: v2\ntables: [{name: public.customers, target: archive.customers, chunks: 3}]\n');
    const run = await suite.stack.runCli(['validate', spec, '--connect']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/public\.customers → archive\.customers: ~2500 rows, 3 chunk\(s\), key \(id\), binary COPY/);
    expect(await suite.dbs.query('target', `SELECT 1 FROM pg_namespace WHERE nspname = 'archive'`)).toEqual([]);
  });

  it('result exits 1 for a migration that failed', async () => {
    // A CHECK added NOT VALID over rows that violate it: the target enforces it, the copy fails for good.
    await suite.dbs.exec(
      'source',
      `CREATE TABLE public.small (id int PRIMARY KEY); INSERT INTO public.small VALUES (1), (-1);
       ALTER TABLE public.small ADD CONSTRAINT pos CHECK (id > 0) NOT VALID;`,
    );
    const spec = file('fails.yaml', 'id: cli-fails\nsource: legacy\ntarget: v2\ntables: [public.small]\n');
    const run = await suite.stack.runCli(['start', spec, '--wait']);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/migration cli-fails FAILED/);
    expect(run.stdout).toMatch(/violates check constraint "pos"/);
    expect((await suite.stack.runCli(['result', 'cli-fails'])).code).toBe(1);

    // --state in any case; the error is the list's last column.
    const failed = await suite.stack.runCli(['list', '--state', 'failed']);
    expect({ code: failed.code, stderr: failed.stderr }).toEqual({ code: 0, stderr: '' });
    const lines = failed.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatch(/^cli-fails\s+FAILED\s+FAILED\s+legacy\s+v2\s+\S+\s+.*violates check constraint "pos"/);
    const json = JSON.parse((await suite.stack.runCli(['list', '--state', 'Failed', '--json'])).stdout);
    expect(json).toEqual([expect.objectContaining({ id: 'cli-fails', state: 'FAILED', error: expect.objectContaining({ message: expect.any(String) }) })]);
    expect(JSON.stringify(json[0].error)).toMatch(/violates check constraint \\"pos\\"/);
    const bad = await suite.stack.runCli(['list', '--state', 'finished']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('must be one of PENDING, QUEUED, RUNNING');
  });

  it('validate --connect lists a prepared target\'s triggers and foreign keys, and both refuse them online when Ferry cannot write as a replica', async () => {
    const tables = `CREATE TABLE public.parents (id int PRIMARY KEY, name text);
      CREATE TABLE public.children (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES public.parents (id) ON DELETE CASCADE);`;
    await suite.dbs.exec('source', `${tables} INSERT INTO public.parents VALUES (1, 'p'); INSERT INTO public.children VALUES (1, 1);`);
    await suite.dbs.exec('target', `${tables}
      CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
      CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.parents FOR EACH ROW EXECUTE FUNCTION public.audit();
      GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${role};`);
    const body = 'source: legacy\nmode: online\ntables: [public.parents, public.children]\n';
    const plan = await suite.stack.runCli(['validate', file('prepared.yaml', `target: v2\n${body}`), '--connect']);
    expect(plan.code).toBe(0);
    expect(plan.stdout).toContain("    note: trigger audit on public.parents does not fire on Ferry's writes (they run as a replica)\n");
    expect(plan.stdout).toContain('    note: foreign key children_parent_id_fkey of public.children (→ public.parents) is neither checked nor acted on');

    const before = [await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')];
    const spec = file('limited.yaml', `id: cli-limited\ntarget: limited\n${body}`);
    for (const args of [['validate', spec, '--connect'], ['start', spec]]) {
      const run = await suite.stack.runCli(args);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain('refused (TargetTriggersFire)');
      expect(run.stderr).toContain('target table public.parents has trigger audit on public.parents, foreign key children_parent_id_fkey');
      expect(run.stderr).toContain(`GRANT SET ON PARAMETER session_replication_role TO ${role}`);
    }
    expect((await suite.stack.runCli(['status', 'cli-limited'])).code).toBe(1);
    expect([await objectInventory(suite.dbs, 'source'), await objectInventory(suite.dbs, 'target')]).toEqual(before);
  });

  it('ferry server runs a dev server with Ferry\'s search attributes and the Web UI, on which ferry worker and ferry start --wait migrate a table, and stops on SIGTERM', async () => {
    const [port, uiPort] = [await freePort(), await freePort()];
    const bad = await suite.stack.runCli(['server', '--port', String(port), '--codec-endpoint', 'ftp://codec']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("option '--codec-endpoint <url>' argument 'ftp://codec' is invalid. must be an http(s) URL");
    const codec = 'http://127.0.0.1:8888';
    const server = spawn(process.execPath, [FERRY_BIN, 'server', '--port', String(port), '--ui-port', String(uiPort), '--codec-endpoint', `${codec}/`], {
      env: suite.stack.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    server.stdout.on('data', (d) => (output += d));
    server.stderr.on('data', (d) => (output += d));
    const exited = new Promise<number | null>((resolve) => server.on('exit', (code) => resolve(code)));
    try {
      await eventually(async () => {
        if (server.exitCode !== null) throw new Error(`ferry server exited ${server.exitCode}: ${output}`);
        return output.includes(`workers and clients: TEMPORAL_ADDRESS=127.0.0.1:${port}`);
      }, 60_000);
      expect(output).toContain(`Temporal dev server on 127.0.0.1:${port}, Web UI http://127.0.0.1:${uiPort}`);
      expect(output).toContain(`payload codec endpoint: ${codec} (the Web UI decodes through it; the temporal CLI takes --codec-endpoint ${codec})`);
      const address = `127.0.0.1:${port}`;
      const connection = await Connection.connect({ address });
      try {
        const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace: 'default' });
        const keyword = temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD;
        for (const name of ['FerryState', 'FerryPhase', 'FerrySource', 'FerryTarget']) expect({ name, type: customAttributes?.[name] }).toEqual({ name, type: keyword });
      } finally {
        await connection.close();
      }
      expect((await fetch(`http://127.0.0.1:${uiPort}/`)).status).toBe(200);

      // The README's five-minute tour: a worker and the CLI pointed at it with TEMPORAL_ADDRESS.
      const on = { TEMPORAL_ADDRESS: address, TEMPORAL_NAMESPACE: 'default' };
      const worker = await suite.stack.startWorkerProcessReady('tour-worker', [], on);
      const spec = file('tour.yaml', 'id: tour\nsource: legacy\ntarget: v2\ntables:\n  - name: public.customers\n    target: tour.customers\n');
      const run = await suite.stack.runCli(['start', spec, '--wait'], on);
      expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 0, stdout: expect.stringMatching(/migration tour SUCCEEDED/) });
      expect(await rowsAsText(suite.dbs, 'target', 'tour.customers', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.customers', 'id'));
      worker.process.kill('SIGTERM');
      expect(await worker.exited).toBe(0);

      server.kill('SIGTERM');
      expect(await exited).toBe(0);
      await expect(fetch(`http://127.0.0.1:${uiPort}/`)).rejects.toThrow();
    } finally {
      if (server.exitCode === null) server.kill('SIGKILL');
    }
  }, 120_000);

  it('start --wait on a terminal draws a bar per table and ends with the result line', async () => {
    // A real pseudo-terminal (util-linux `script`): the CLI sees a TTY and draws cli-progress bars.
    const spec = file('tty.yaml', 'id: cli-tty\nsource: legacy\ntarget: v2\ntables: [{name: public.customers, target: tty.customers}]\n');
    const { code, stdout, stderr } = await suite.stack.runCliOnTerminal(['start', spec, '--wait'], 100_000);
    // Without the terminal's control sequences: what an operator reads.
    const text = stripVTControlCharacters(stdout + stderr);
    expect({ code, text }).toEqual({ code: 0, text: expect.stringMatching(/migration cli-tty SUCCEEDED/) });
    // The pseudo-terminal has no size, which the bars take as 80 columns: the figures come before
    // the bar, so they stay in view.
    expect(text).toMatch(/ public\.customers → tty\.customers 100% 2500\/2500 rows \|█+\| /);
    expect(await rowsAsText(suite.dbs, 'target', 'tty.customers', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.customers', 'id'));
  }, 120_000);

  it('watch on a terminal of an online migration whose copy ended before it began: no NULL, no rate, no ETA, and no lag once done', async () => {
    const { id } = await suite.stack.ferry.start(
      { source: 'legacy', target: 'v2', mode: 'online', cutover: { approval: 'manual' }, tables: [{ name: 'public.customers', target: 'late.customers' }] },
      { id: 'cli-late-watch' },
    );
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 90_000);
    const watching = onTerminal(suite.stack.env, ['watch', id]);
    try {
      // A dozen readings of the waiting migration (one a second; its header is redrawn at each):
      // cli-progress's own ETA of rows that no longer move read NULL from the eleventh.
      const readings = () => watching.output().match(/cli-late-watch · RUNNING · AWAITING_APPROVAL/g)?.length ?? 0;
      await eventually(async () => readings() >= 12, 60_000, 250);
      await suite.stack.ferry.approve(id);
      expect(await watching.exited).toBe(0);
    } finally {
      watching.child.kill('SIGKILL');
    }
    const text = watching.output();
    expect(text).not.toMatch(/NULL|INF|NaN|ETA|rows\/s/);
    const drawn = text.split(/\r|\n/).filter((l) => l.startsWith(' public.customers → late.customers '));
    expect(drawn[0]).toMatch(/ 100% 2500\/2500 rows \|█+\| caught up \| AWAITING_APPROVAL lag \d+ \(\d+\.\ds\)\s*$/);
    expect(drawn[drawn.length - 1]).toMatch(/ 100% 2500\/2500 rows \|█+\| done \| COMPLETED\s*$/);
    expect(text).toMatch(/cli-late-watch · SUCCEEDED · COMPLETED · \S+ · 2500 rows · write outage \d+ ms/);
    expect(await rowsAsText(suite.dbs, 'target', 'late.customers', 'id')).toEqual(await rowsAsText(suite.dbs, 'source', 'public.customers', 'id'));
    // `ferry status` of it: the table COMPLETED, without the lag it last read before the cutover.
    const status = await suite.stack.runCli(['status', id]);
    expect(status.stdout).toMatch(/^ {2}public\.customers → late\.customers {2}COMPLETED {2}2500 \/ ~2500 rows \(100%\) {2}chunks 1\/1$/m);
  }, 150_000);
});
