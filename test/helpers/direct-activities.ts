/**
 * Ferry's activities called directly, without a Temporal server, on a suite's own databases (the
 * connection names src and dst for its source and target roles): for tests of what one activity
 * does to real data, where a whole migration would only add time and noise.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { ConnectionRegistry } from '../../src/db/connections';
import { silentLogger } from '../../src/logger';
import { TestDatabases } from './databases';

export interface DirectActivities {
  activities: ReturnType<typeof createActivities>;
  /** Runs `fn` as an activity would run (its Context, heartbeats, cancellation signal). */
  run<T>(fn: () => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export function directActivities(dbs: TestDatabases): DirectActivities {
  const env = { FERRY_CONN_SRC: dbs.url('source'), FERRY_CONN_DST: dbs.url('target') };
  const connections = new ConnectionRegistry({ env });
  return {
    activities: createActivities({ connections, logger: silentLogger(), env }),
    run: <T>(fn: () => Promise<T>) => new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR') }).run(fn) as Promise<T>,
    close: () => connections.close(),
  };
}
