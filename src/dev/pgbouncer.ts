/**
 * A real PgBouncer for the switch's tests and the demo: Debian's `pgbouncer` package (installed
 * when missing, as Chromium is), started in a directory of its own in transaction pooling with
 * its databases in a file its configuration %includes — the file the switch rewrites.
 * PgBouncer refuses to run as root: started by root, it runs as the owner of PostgreSQL's files
 * (`-u`).
 */
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { ensureDebianPackage, locateExecutable } from './chromium';
import { freePort } from '../free-port';

export const PGBOUNCER_PACKAGE = 'pgbouncer';
const DEBIAN_PATH = '/usr/sbin/pgbouncer';

export function locatePgBouncer(env: NodeJS.ProcessEnv = process.env): string | null {
  return locateExecutable(env, 'FERRY_PGBOUNCER_BIN', 'pgbouncer', DEBIAN_PATH);
}

/** PgBouncer's path, installing Debian's package when this process may. */
export function ensurePgBouncer(report?: (line: string) => void): string {
  return ensureDebianPackage({
    pkg: PGBOUNCER_PACKAGE,
    purpose: 'the switch (cutover.switch: pgbouncer)',
    locate: () => locatePgBouncer(),
    ...(report ? { report } : {}),
    notFound: (reason) =>
      new Error(`PgBouncer was not found (PATH, ${DEBIAN_PATH}, FERRY_PGBOUNCER_BIN). ${reason} Install Debian's \`${PGBOUNCER_PACKAGE}\` package (apt-get install ${PGBOUNCER_PACKAGE}).`),
  });
}

/** A pooled database's server (user and password: where the server wants a password, as embedded PostgreSQL does). */
export interface PooledServer {
  host: string;
  port: number;
  dbname: string;
  user?: string;
  password?: string;
}

/** A pooled database's server from its postgres:// URL (user and password only when it has a password). */
export function pooledServer(url: string): PooledServer {
  const parsed = new URL(url);
  const password = decodeURIComponent(parsed.password);
  return {
    host: parsed.hostname,
    port: Number(parsed.port || 5432),
    dbname: decodeURIComponent(parsed.pathname.slice(1)),
    ...(password ? { user: decodeURIComponent(parsed.username), password } : {}),
  };
}

export interface PgBouncer {
  port: number;
  /** The file PgBouncer's configuration %includes: the pooled databases' entries. */
  databasesFile: string;
  /** A client's URL for a pooled database. */
  url(database: string): string;
  /** The admin console's URL (database pgbouncer, user postgres). */
  adminUrl: string;
  /** One admin console command's rows (SHOW DATABASES…). */
  admin(command: string): Promise<Record<string, string>[]>;
  stop(): Promise<void>;
}

/** The user PgBouncer runs as when started by root: the owner of PostgreSQL's files. */
function runAs(): { user: string; uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  const uid = id('-u');
  if (!Number.isInteger(uid) || uid <= 0) throw new Error('PgBouncer refuses to run as root and this machine has no postgres user to run it as');
  return { user: 'postgres', uid, gid: id('-g') };
}

function configText(dir: string, port: number, databasesFile: string): string {
  return [
    '[databases]',
    `%include ${databasesFile}`,
    '',
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `auth_file = ${join(dir, 'users.txt')}`,
    'admin_users = postgres',
    'pool_mode = transaction',
    'max_client_conn = 500',
    'default_pool_size = 20',
    'ignore_startup_parameters = extra_float_digits,options',
    `logfile = ${join(dir, 'pgbouncer.log')}`,
    '',
  ].join('\n');
}

/** PgBouncer on a free port in front of `databases`, until stop(). */
export async function startPgBouncer(databases: Record<string, PooledServer>): Promise<PgBouncer> {
  const binary = ensurePgBouncer();
  const dir = mkdtempSync(join(tmpdir(), 'ferry-pgbouncer-'));
  const port = await freePort();
  const databasesFile = join(dir, 'databases.ini');
  const credentials = (s: PooledServer) => (s.password ? ` user=${s.user} password=${s.password}` : '');
  const entries = Object.entries(databases).map(([name, s]) => `${name} = host=${s.host} port=${s.port} dbname=${s.dbname}${credentials(s)}`);
  // Only PgBouncer's user reads them: the entries may hold a server's password.
  writeFileSync(databasesFile, ['[databases]', ...entries, ''].join('\n'), { mode: 0o600 });
  writeFileSync(join(dir, 'users.txt'), '"postgres" ""\n', { mode: 0o600 });
  const ini = join(dir, 'pgbouncer.ini');
  writeFileSync(ini, configText(dir, port, databasesFile), { mode: 0o600 });
  const user = runAs();
  if (user) {
    chmodSync(dir, 0o700);
    for (const path of [dir, databasesFile, ini, join(dir, 'users.txt')]) chownSync(path, user.uid, user.gid);
  }
  const child = spawn(binary, [...(user ? ['-u', user.user] : []), ini], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr = (stderr + d).slice(-4000)));
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/pgbouncer`;
  const admin = async (command: string) => {
    const client = new Client({ connectionString: adminUrl });
    await client.connect();
    try {
      return (await client.query(command)).rows as Record<string, string>[];
    } finally {
      await client.end();
    }
  };
  await untilListening(child, admin, () => `${stderr}${readLog(dir)}`);
  return {
    port,
    databasesFile,
    url: (database) => `postgres://postgres@127.0.0.1:${port}/${database}`,
    adminUrl,
    admin,
    async stop() {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function readLog(dir: string): string {
  try {
    return readFileSync(join(dir, 'pgbouncer.log'), 'utf8').slice(-4000);
  } catch {
    return '';
  }
}

async function untilListening(child: ChildProcess, admin: (command: string) => Promise<unknown>, output: () => string): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`PgBouncer exited with ${child.exitCode}: ${output()}`);
    try {
      await admin('SHOW VERSION');
      return;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`PgBouncer did not answer within 15 s (${(err as Error).message}): ${output()}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
