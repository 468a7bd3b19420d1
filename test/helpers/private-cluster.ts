/**
 * Private PostgreSQL clusters for tests that need a server configured in a way the shared one
 * must never be (wal_level=logical, a streaming standby) or of another major version: made by
 * src/dev/pg-cluster.ts. A standby is a pg_basebackup -R of a running primary (the machine's
 * PostgreSQL 15: the npm builds ship no pg_basebackup), on a port of its own.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../../src/dev/dev-server';
import { clusterDir, pg, PrivateCluster, startPrivateCluster, startServer } from '../../src/dev/pg-cluster';

export { binDir, pg, SERVER_MAJORS, startPrivateCluster } from '../../src/dev/pg-cluster';
export type { PrivateCluster, ServerMajor } from '../../src/dev/pg-cluster';

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
