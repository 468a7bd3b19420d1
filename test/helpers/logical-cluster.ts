/**
 * A private PostgreSQL 15 cluster with wal_level=logical, for tests of logical capture: the
 * shared server runs wal_level=replica and must never be reconfigured (see private-cluster.ts
 * for how the cluster is made and removed).
 */
import { Client } from 'pg';
import { TestDatabases } from './databases';
import { PrivateCluster, startPrivateCluster } from './private-cluster';
import { eventually } from './stack';

export type LogicalCluster = PrivateCluster;

export async function startLogicalCluster(settings: Record<string, string> = {}): Promise<LogicalCluster> {
  return startPrivateCluster({ wal_level: 'logical', max_replication_slots: '10', ...settings }, 'ferry-logical-');
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

/**
 * Someone drops every replication slot of the server behind Ferry's back: ends the WAL senders
 * that hold them and drops each once it is let go (a consumer may take it again in between).
 */
export async function dropSlotsBehindFerry(dbs: TestDatabases, role: string): Promise<void> {
  await eventually(async () => {
    await dbs.exec(role, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active_pid IS NOT NULL`);
    await dbs.exec(role, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active`);
    return (await dbs.query(role, 'SELECT 1 FROM pg_replication_slots')).length === 0;
  }, 20_000);
}
