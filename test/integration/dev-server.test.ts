/**
 * The Temporal dev server Ferry starts (tests, benches, `ferry server`, the demo): when it cannot
 * start, the error carries the server's own first words (a Go panic's stack would otherwise push
 * them out), and the process is gone; when a port Ferry chose was taken in the meantime, it
 * starts again on new ones.
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

/** A listener of the test's own on `port`, so that the port is taken. */
async function holdPort(port: number): Promise<Server> {
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', () => resolve()));
  return holder;
}

describe('the Temporal dev server', () => {
  it('fails with its own reason when the port it is given is taken, and leaves no process', async () => {
    const port = await freePort();
    const holder = await holdPort(port);
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

  it('starts again on new ports when a port it chose was taken before the server bound it', async () => {
    const taken = await freePort();
    const holder = await holdPort(taken);
    // The first port handed out is taken by then, as when another suite's server took it between
    // Ferry picking it free and this server binding it.
    const handedOut: number[] = [];
    const pickPort = async () => {
      const port = handedOut.length === 0 ? taken : await freePort();
      handedOut.push(port);
      return port;
    };
    const reported: string[] = [];
    let server: Awaited<ReturnType<typeof startDevServer>> | undefined;
    try {
      server = await startDevServer({ headless: true, pickPort, report: (line) => reported.push(line) });
      expect(reported.filter((l) => l.includes('found a port taken (attempt 1)'))).toHaveLength(1);
      expect(handedOut[0]).toBe(taken);
      expect(handedOut.length).toBeGreaterThanOrEqual(2);
      expect(server.address).toBe(`127.0.0.1:${handedOut[handedOut.length - 1]}`);
      expect(serversOn(taken)).toEqual([]);
    } finally {
      await server?.stop();
      holder.close();
    }
  }, 120_000);
});
