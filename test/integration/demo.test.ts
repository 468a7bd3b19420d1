/**
 * `npm run demo` — the README's first command — at a reduced size: an online migration under a
 * live writer, approved, with a signed callback; it must exit 0 and say what it checked. Once on
 * the local PostgreSQL, once with no server reachable, where it falls back to embedded PostgreSQL.
 */
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../src/dev/dev-server';
import { ROOT } from '../helpers/stack';

async function demo(args: string[], extraEnv: Record<string, string> = {}): Promise<{ code: number | null; output: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extraEnv };
  delete env.TEMPORAL_ADDRESS; // the demo starts its own dev server
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'scripts', 'run.js'), 'scripts/demo.ts', '--rows', '3000', ...args], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.on('exit', (c) => resolve({ code: c, output }));
  });
}

function expectMigrated(output: string): void {
  expect(output).toMatch(/migration demo-\S+ SUCCEEDED/);
  expect(output).toMatch(/ferry approve demo-/);
  expect(output).toMatch(/cutover: write outage \d+\.\d+s/);
  expect(output).toMatch(/then the source refused writes: table shop\.\w+ is frozen: Ferry migration demo-\S+ (moved it|is cutting it over)/);
  expect(output).toMatch(/X-Ferry-Signature: t=\d+,v1=[0-9a-f]{64}\s+\(verified with the shared secret\)/);
  const items = /shop\.order_items: source (\d+) rows, target (\d+) rows, identical/.exec(output);
  expect(items).not.toBeNull();
  expect(Number(items![1])).toBeGreaterThan(6000); // the writer added order lines while the migration ran
}

const embeddedDataDirs = () => readdirSync(tmpdir()).filter((f) => f.startsWith('ferry-pg-'));

describe('npm run demo', () => {
  it('migrates the demo shop online under a writer and finds both sides identical', async () => {
    const { code, output } = await demo([]);
    expectMigrated(output);
    expect(output).toMatch(/Databases: PostgreSQL at 127\.0\.0\.1:5432/);
    expect(code).toBe(0);
  });

  it('falls back to embedded PostgreSQL when no server answers, and removes it afterwards', async () => {
    const before = embeddedDataDirs();
    const nobody = `postgres://postgres@127.0.0.1:${await freePort()}/postgres`;
    const { code, output } = await demo([], { FERRY_TEST_PG: nobody });
    expect(output).toMatch(/PostgreSQL: none answers at 127\.0\.0\.1:\d+; falling back to embedded PostgreSQL/);
    expect(output).toMatch(/Databases: embedded PostgreSQL 15 at 127\.0\.0\.1:\d+/);
    expectMigrated(output);
    expect(code).toBe(0);
    expect(embeddedDataDirs()).toEqual(before);
  });

  it('refuses a server named with --pg that does not answer, instead of falling back', async () => {
    const { code, output } = await demo(['--pg', `postgres://postgres@127.0.0.1:${await freePort()}/postgres`]);
    expect(output).toMatch(/ferry: PostgreSQL is not reachable at postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres \(connect ECONNREFUSED/);
    expect(output).not.toMatch(/embedded|Temporal/);
    expect(code).toBe(1);
  });
});
