/**
 * A private PostgreSQL 15 cluster with wal_level=logical, for tests of logical capture: the
 * shared server runs wal_level=replica and must never be reconfigured (see private-cluster.ts
 * for how the cluster is made and removed).
 */
import { Client } from 'pg';
import { PrivateCluster, startPrivateCluster } from './private-cluster';

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
