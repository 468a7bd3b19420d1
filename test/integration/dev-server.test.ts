/**
 * The Temporal dev server Ferry starts (tests, benches, `ferry server`, the demo): when it cannot
 * start, the error carries the server's own first words (a Go panic's stack would otherwise push
 * them out), and the process is gone.
 */
import { execFileSync } from 'node:child_process';
import { createServer, Server } from 'node:net';
import { freePort, startDevServer } from '../../src/dev/dev-server';
import { eventually } from '../helpers/stack';

/** Dev server processes started for this port, by their command lines. */
function serversOn(port: number): string[] {
  const ps = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
  return ps.split('\n').filter((l) => l.includes('server start-dev') && l.includes(`--port ${port} `));
}

describe('the Temporal dev server', () => {
  it('fails with its own reason when the port it is given is taken, and leaves no process', async () => {
    const port = await freePort();
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', () => resolve()));
    try {
      // A port the caller gave is not swapped for another: the start fails, naming the cause.
      await expect(startDevServer({ port, headless: true })).rejects.toThrow(
        new RegExp(`could not start the Temporal dev server .*127\\.0\\.0\\.1:${port}: bind: address already in use`, 's'),
      );
      await eventually(async () => serversOn(port).length === 0, 10_000);
    } finally {
      holder.close();
    }
  }, 90_000);
});
