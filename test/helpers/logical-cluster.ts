/**
 * A private PostgreSQL 15 cluster with wal_level=logical, for tests of logical capture: the
 * shared server runs wal_level=replica and must never be reconfigured. initdb in a temporary
 * directory, pg_ctl on a free port (as the postgres OS user when the tests run as root), trust
 * authentication on 127.0.0.1 only; stop() shuts it down and deletes the directory.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { freePort } from '../../src/dev/dev-server';

const run = promisify(execFile);
const BIN = process.env.FERRY_PG_BIN ?? '/usr/lib/postgresql/15/bin';

export interface LogicalCluster {
  /** Admin URL (user postgres, database postgres). */
  url: string;
  port: number;
  stop(): Promise<void>;
}

/** Runs a PostgreSQL binary, as the postgres OS user when this process is root (initdb refuses root). */
async function pg(binary: string, args: string[]): Promise<void> {
  const asRoot = process.getuid?.() === 0;
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', join(BIN, binary), ...args]] : [join(BIN, binary), args];
  await run(file, argv, { timeout: 120_000 });
}

export async function startLogicalCluster(settings: Record<string, string> = {}): Promise<LogicalCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-logical-'));
  // The postgres user must reach the directory (tmpdir's own mode lets it; mkdtemp's 0700 would not).
  chmodSync(dir, 0o777);
  const data = join(dir, 'data');
  const port = await freePort();
  try {
    await pg('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8', '--locale=C.UTF-8']);
    const conf = {
      listen_addresses: "'127.0.0.1'",
      port: String(port),
      unix_socket_directories: `'${dir}'`,
      wal_level: 'logical',
      max_replication_slots: '10',
      max_wal_senders: '10',
      fsync: 'off',
      shared_buffers: "'32MB'",
      ...settings,
    };
    writeFileSync(join(dir, 'extra.conf'), Object.entries(conf).map(([k, v]) => `${k} = ${v}`).join('\n') + '\n');
    chmodSync(join(dir, 'extra.conf'), 0o644);
    await run('sh', ['-c', `cat '${join(dir, 'extra.conf')}' >> '${join(data, 'postgresql.conf')}'`]);
    await pg('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '60', 'start']);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    url,
    port,
    async stop() {
      await pg('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A setting of the cluster (or any server) as text. */
export async function serverSetting(url: string, name: string): Promise<string> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query('SELECT current_setting($1) AS v', [name])).rows[0].v;
  } finally {
    await client.end();
  }
}
