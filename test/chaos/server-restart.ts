/**
 * The Temporal server goes away mid-copy and comes back: a dev server persisting to a SQLite
 * file on a fixed port is stopped while two `ferry worker` processes copy (throttled, so the
 * copy spans the outage), stays down for a few seconds, and starts again on the same port and
 * file. The same worker processes and the test's client carry on against it — no restarts, no
 * new connections — and the migration completes with the target equal to the source row for
 * row (SQL on both databases). The client's wait for the result, begun before the stop, lasts
 * through the outage (in the soak tier longer than the gRPC client's own retries, about 20 s). The checkpoints, read in the target, show the copy going on while
 * the server is down and again after it is back; and every row was counted once.
 */
import { compareTable, ledgerSql, sleep } from '../helpers/chaos';
import { eventually, resultWithin, RunningProcessWorker } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';
import { expectCleanRun } from '../helpers/repairs';

/**
 * The suite with the server down for `downMs` over a copy of `rows` rows (5,000 a second): the
 * soak tier's 25 s outage is longer than the gRPC client's own retries of a call (10 attempts,
 * about 20 s in all); `npm test`'s 8 s outage over a shorter copy is the same path, quicker.
 */
export function serverRestartSuite({ downMs: DOWN_MS, rows: ROWS }: { downMs: number; rows: number }): void {
  describe('a Temporal server restart during the copy', () => {
    const suite = stackSuite({
      name: 'srvrestart',
      databases: { source: ledgerSql(ROWS), target: '' },
      connections: { old: 'source', new: 'target' },
      workers: 0,
      restartableServer: true,
    });

    const copied = async () =>
      (await suite.dbs.query<{ n: number }>('target', 'SELECT coalesce(sum(rows_copied), 0)::int AS n FROM _ferry.checkpoints').catch(() => [{ n: 0 }]))[0].n;

    it('loses nothing: workers and client reconnect to the restarted server and the copy completes', async () => {
      const workers: RunningProcessWorker[] = await Promise.all([suite.stack.startWorkerProcessReady('w1'), suite.stack.startWorkerProcessReady('w2')]);
      const { id } = await suite.stack.ferry.start(
        { source: 'old', target: 'new', batchRows: 2000, tables: [{ name: 'public.ledger', chunks: 2 }] },
        { id: 'server-restart' },
      );
      await suite.stack.ferry.throttle(id, { rowsPerSecond: 5_000 });
      await eventually(async () => (await copied()) > 0, 60_000, 100);

      // The wait for the result begins before the stop and must outlast the outage.
      let waitEnded: string | undefined;
      const waiting = suite.stack.ferry.result(id).then(
        (r) => ((waitEnded = `result ${r.state}`), r),
        (err: Error) => {
          waitEnded = `error ${err.message}`;
          throw err;
        },
      );
      waiting.catch(() => undefined);
      const firstServer = suite.stack.server.process?.pid;
      const stopping = Date.now();
      const outputBefore = workers.map((w) => w.output().length);
      await suite.stack.stopServer();
      const atStop = await copied();
      const stopMs = Date.now() - stopping;
      await sleep(DOWN_MS);
      // Down: the workers keep running (their activities talk to PostgreSQL, not to Temporal).
      for (const w of workers) expect({ worker: w.identity, exitCode: w.process.exitCode, signal: w.process.signalCode }).toEqual({ worker: w.identity, exitCode: null, signal: null });
      const atRestart = await copied();
      // The copy went on while Temporal was away: slices talk to PostgreSQL, not to the server.
      expect(atRestart).toBeGreaterThan(atStop);
      // The wait did not give up while the server was away.
      expect(waitEnded).toBeUndefined();
      await suite.stack.startServer();
      expect(suite.stack.server.process?.pid).not.toBe(firstServer);

      // The same client (one gRPC channel, reconnecting by itself) steers and waits.
      let signalAttempts = 0;
      await eventually(async () => {
        signalAttempts += 1;
        await suite.stack.ferry.throttle(id, { rowsPerSecond: 0 });
        return true;
      }, 60_000, 500);
      // And it goes on after the restart, from the checkpoints it had reached, not from the start.
      await eventually(async () => (await copied()) > atRestart, 60_000, 100);
      const result = await resultWithin(suite.stack.ferry, id, 240_000);
      // The wait begun before the outage ends with the same result.
      expect((await waiting).state).toBe(result.state);
      // A worker's output is kept to its last 20,000 characters: the slice can begin mid-line, so
      // each line's message is read where it parses.
      const warnings = workers.flatMap((w, i) => w.output().slice(outputBefore[i]).split('\n').filter((l) => /"level":(40|50)/.test(l)));
      const message = (line: string) => {
        try {
          return String((JSON.parse(line) as { msg?: string }).msg).slice(0, 80);
        } catch {
          return '(a line cut by the output buffer)';
        }
      };
      const whileDown = `${warnings.length} (${[...new Set(warnings.map(message))].join(' | ')})`;
      console.log(
        `server restart: ${atStop} rows copied when the server had stopped (${stopMs} ms), ${atRestart} when it came back after ${DOWN_MS / 1000}s; ` +
          `worker warnings/errors logged since the stop: ${whileDown}; first signal after the restart took ${signalAttempts} attempt(s); ${result.state}`,
      );

      expect(result.error).toBeNull();
      expect(result.state).toBe('SUCCEEDED');
      // The same two worker processes did all of it.
      for (const w of workers) expect(w.process.exitCode).toBeNull();
      expect(suite.stack.processes).toHaveLength(2);
      const cmp = await compareTable(suite.dbs, 'source', 'target', 'public.ledger', 'id');
      expect({ equal: cmp.equal, rows: cmp.targetRows, duplicateKeys: cmp.duplicateKeys, missing: cmp.missing, extra: cmp.extra }).toEqual({
        equal: true,
        rows: ROWS,
        duplicateKeys: 0,
        missing: [],
        extra: [],
      });
      expect(result.tables[0].rowsCopied).toBe(ROWS);
      await expectCleanRun(suite.stack.ferry, result);
    }, 400_000);
  });
}
