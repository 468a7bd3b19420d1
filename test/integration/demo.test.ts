/**
 * `npm run demo` — the README's first command — at a reduced size: an online migration under a
 * live writer, approved, with a signed callback; it must exit 0 and say what it checked.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from '../helpers/stack';

describe('npm run demo', () => {
  it('migrates the demo shop online under a writer and finds both sides identical', async () => {
    const env = { ...process.env };
    delete env.TEMPORAL_ADDRESS; // the demo starts its own dev server
    const { code, output } = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn(process.execPath, [join(ROOT, 'scripts', 'run.js'), 'scripts/demo.ts', '--rows', '3000'], {
        cwd: ROOT,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (d) => (output += d));
      child.stderr.on('data', (d) => (output += d));
      child.on('exit', (c) => resolve({ code: c, output }));
    });
    expect(output).toMatch(/migration demo-\S+ SUCCEEDED/);
    expect(output).toMatch(/ferry approve demo-/);
    expect(output).toMatch(/cutover: write outage \d+\.\d+s/);
    expect(output).toMatch(/then the source refused writes: table shop\.\w+ is frozen: Ferry migration demo-\S+ moved it/);
    expect(output).toMatch(/X-Ferry-Signature: t=\d+,v1=[0-9a-f]{64}\s+\(verified with the shared secret\)/);
    const items = /shop\.order_items: source (\d+) rows, target (\d+) rows, identical/.exec(output);
    expect(items).not.toBeNull();
    expect(Number(items![1])).toBeGreaterThan(6000); // the writer added order lines while the migration ran
    expect(code).toBe(0);
  });
});
