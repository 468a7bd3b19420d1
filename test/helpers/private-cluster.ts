/**
 * Private PostgreSQL 15 clusters for tests that need a server configured in a way the shared one
 * must never be (wal_level=logical, a streaming standby): initdb in a temporary directory, pg_ctl
 * on a free port (as the postgres OS user when the tests run as root: initdb and the server refuse
 * root), trust authentication on 127.0.0.1 only; stop() shuts a cluster down and deletes its
 * directory. A standby is a pg_basebackup -R of a running primary, on a port of its own.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../src/dev/dev-server';

const run = promisify(execFile);
const BIN = process.env.FERRY_PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** PostgreSQL majors whose server builds the project installs from npm (package.json: pg-server-<major>). */
export const SERVER_MAJORS = [12, 13, 16, 17, 18] as const;
export type ServerMajor = (typeof SERVER_MAJORS)[number];

/**
 * Where a PostgreSQL build's programs are: the machine's own (15, with pg_basebackup and pg_dump)
 * or the npm package of another major (initdb, pg_ctl and postgres only).
 */
export function binDir(major?: ServerMajor): string {
  if (major === undefined) return BIN;
  // The package's entry point is dist/index.js; its programs are in native/bin beside dist.
  return join(dirname(dirname(require.resolve(`pg-server-${major}`))), 'native', 'bin');
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
function clusterDir(prefix: string): string {
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
async function startServer(dir: string, data: string, port: number, settings: Record<string, string>, bin = BIN): Promise<PrivateCluster> {
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

/**
 * A hot standby streaming from `primary`: pg_basebackup -R (standby.signal and primary_conninfo)
 * over the replication connection initdb's trust rules allow on 127.0.0.1, started on a free port.
 * The primary's postgresql.conf comes along in the copy; `settings` are appended after it.
 */
export async function startStandby(primary: PrivateCluster, settings: Record<string, string> = {}): Promise<PrivateCluster> {
  const dir = clusterDir('ferry-standby-');
  const data = join(dir, 'data');
  try {
    await pg('pg_basebackup', ['-D', data, '-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-R', '-X', 'stream', '-c', 'fast', '--no-sync']);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return startServer(dir, data, await freePort(), { hot_standby: 'on', ...settings });
}

export interface StreamingPair {
  primary: PrivateCluster;
  standby: PrivateCluster;
  /** Stops both and deletes their directories, the standby first. */
  stop(): Promise<void>;
}

/** A primary (wal_level=replica) and one streaming standby of it. */
export async function startStreamingPair(primarySettings: Record<string, string> = {}, standbySettings: Record<string, string> = {}): Promise<StreamingPair> {
  const primary = await startPrivateCluster({ wal_level: 'replica', ...primarySettings }, 'ferry-primary-');
  let standby: PrivateCluster;
  try {
    standby = await startStandby(primary, standbySettings);
  } catch (err) {
    await primary.stop();
    throw err;
  }
  return {
    primary,
    standby,
    async stop() {
      await standby.stop();
      await primary.stop();
    },
  };
}
