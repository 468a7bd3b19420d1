/** `npm run demo` — the README's first command — at a reduced size: it must exit 0. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from '../helpers/stack';

describe('npm run demo', () => {
  it('migrates the demo shop and finds both sides identical', async () => {
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
    expect(output).toMatch(/shop\.order_items: source 6000 rows, target 6000 rows, identical/);
    expect(code).toBe(0);
  });
});
