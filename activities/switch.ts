/**
 * The switch (cutover.switch: pgbouncer): PgBouncer holds the application's queries while the
 * cutover freezes and drains the source, then sends them to the target.
 *
 *   pausePool    PAUSE the pooled database on the admin console: PgBouncer waits for the
 *                transactions in flight, closes its server connections and holds new queries;
 *   repointPool  the database's entry in the file PgBouncer's configuration includes points at
 *                the target (the entry's other settings kept; the file as it was is kept beside
 *                it until the switch is over), then RELOAD, checked with SHOW DATABASES;
 *   resumePool   RESUME: the held queries run — on the target, or (revert) on the source again
 *                with the entry put back as it was.
 *
 * These run on the worker beside PgBouncer (`ferry worker --task-queue …`): the file is on its
 * host. Each is idempotent, so a retry after a lost worker repeats it safely.
 */
import { constants, existsSync } from 'node:fs';
import { access, chown, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { Client } from 'pg';
import { EntryServer, findEntry, repointedEntry, withLine } from '../src/core/pgbouncer-entry';
import { FAILURE } from '../src/core/failure-types';
import { ActivityDeps } from './deps';

export interface PoolRef {
  migrationId: string;
  /** Connection name of PgBouncer's admin console. */
  admin: string;
  database: string;
  configFile: string;
}

export interface PausePoolInput extends PoolRef {
  /** How long PAUSE may wait for the transactions in flight (cutover.maxWait); then RESUME and a refusal. */
  timeoutMs: number;
}

/** The admin console's commands take a database name as a word or in double quotes. */
function quoted(database: string): string {
  return `"${database.replace(/"/g, '""')}"`;
}

/** The file as it was before this migration's switch: the revert puts its entry back. */
function keptCopy(ref: PoolRef): string {
  return `${ref.configFile}.ferry-${ref.migrationId}`;
}

export function createSwitchActivities({ connections, logger }: Pick<ActivityDeps, 'connections' | 'logger'>) {
  async function admin<T>(ref: PoolRef, work: (console: Client) => Promise<T>): Promise<T> {
    // A plain session: the admin console takes no SET, so none of the pinned session settings.
    const console = new Client({ connectionString: connections.url(ref.admin), connectionTimeoutMillis: 10_000 });
    console.on('error', () => undefined);
    await console.connect();
    try {
      return await work(console);
    } finally {
      await console.end().catch(() => undefined);
    }
  }

  async function resume(console: Client, database: string): Promise<void> {
    try {
      await console.query(`RESUME ${quoted(database)}`);
    } catch (err) {
      // Not paused: what a retry after a RESUME that went through finds.
      if (!/is not paused/.test((err as Error).message)) throw err;
    }
  }

  return {
    /**
     * Preflight's check, on the switch worker: the admin console answers, PgBouncer knows the
     * database and pools it by transaction or statement, the file holds its entry and can be
     * rewritten here, and this worker knows the target. Nothing is changed.
     */
    async checkPool(input: PoolRef & { target: string }): Promise<{ poolMode: string }> {
      entryServer(connections.url(input.target));
      const poolMode = await admin(input, async (console) => {
        const { rows } = await console.query<{ name: string; pool_mode: string | null }>('SHOW DATABASES');
        const row = rows.find((r) => r.name === input.database);
        if (!row) throw switchRefusal(`database: PgBouncer has no database ${input.database}: name the pooled database the application connects to`);
        const config = await console.query<{ key: string; value: string }>('SHOW CONFIG');
        return row.pool_mode || config.rows.find((r) => r.key === 'pool_mode')?.value || 'session';
      });
      if (poolMode === 'session') {
        throw switchRefusal(`database: PgBouncer pools ${input.database} by session, where PAUSE waits for every client to disconnect: set pool_mode = transaction for it`);
      }
      await readConfig(input);
      try {
        await access(input.configFile, constants.W_OK);
        await access(dirname(input.configFile), constants.W_OK);
      } catch {
        throw switchRefusal(`configFile: the switch worker cannot write ${input.configFile} (nor a file beside it): give its user write access to the file and its directory`);
      }
      return { poolMode };
    },

    async pausePool(input: PausePoolInput): Promise<{ issuedAt: string; pausedAt: string }> {
      return admin(input, async (console) => {
        // An earlier attempt's PAUSE outlives its lost worker; the source is not frozen yet, so
        // the held queries may run there for a moment before this attempt pauses again.
        if (await isPaused(console, input.database)) await resume(console, input.database);
        const issuedAt = new Date().toISOString();
        const paused = await untilOrTimeout(console.query(`PAUSE ${quoted(input.database)}`), input.timeoutMs);
        if (!paused) {
          await admin(input, (other) => resume(other, input.database));
          throw ApplicationFailure.nonRetryable(
            `PgBouncer's PAUSE of ${input.database} waited ${Math.round(input.timeoutMs / 1000)}s for transactions in flight through the pooler and they did not end; ` +
              'resumed on the source and rolled back (end them, use transaction pooling, or set a longer cutover.maxWait)',
            FAILURE.CutoverBlocked,
          );
        }
        return { issuedAt, pausedAt: new Date().toISOString() };
      });
    },

    /** Its result says when, not where: a server's address stays on the workers, as connection URLs do. */
    async repointPool(input: PoolRef & { target: string }): Promise<{ at: string }> {
      const server = entryServer(connections.url(input.target));
      const text = await readConfig(input);
      if (!existsSync(keptCopy(input))) await writeFile(keptCopy(input), text, { mode: (await stat(input.configFile)).mode & 0o777 });
      const entry = findEntry(text, input.database)!;
      await replaceFile(input.configFile, withLine(text, entry.index, repointedEntry(entry.line, input.database, server)));
      await admin(input, async (console) => {
        await console.query('RELOAD');
        await expectEntry(console, input.database, server);
      });
      logger.info({ migrationId: input.migrationId, database: input.database, host: server.host, port: server.port, dbname: server.dbname }, 'pgbouncer repointed');
      return { at: new Date().toISOString() };
    },

    async resumePool(input: PoolRef & { revert: boolean }): Promise<{ at: string; reverted: boolean }> {
      const kept = keptCopy(input);
      const reverted = input.revert && existsSync(kept);
      if (reverted) {
        const before = findEntry(await readFile(kept, 'utf8'), input.database);
        const text = await readFile(input.configFile, 'utf8');
        const now = findEntry(text, input.database);
        if (before && now) await replaceFile(input.configFile, withLine(text, now.index, before.line));
      }
      await admin(input, async (console) => {
        if (reverted) await console.query('RELOAD');
        await resume(console, input.database);
      });
      await rm(kept, { force: true });
      return { at: new Date().toISOString(), reverted };
    },
  };
}

/** A refusal of the switch's settings, naming the field under cutover.switch.pgbouncer. */
function switchRefusal(message: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(`cutover.switch.pgbouncer.${message}`, FAILURE.SwitchRefused);
}

async function isPaused(console: Client, database: string): Promise<boolean> {
  const { rows } = await console.query<{ name: string; paused: string }>('SHOW DATABASES');
  return rows.some((r) => r.name === database && String(r.paused) === '1');
}

/** Whether `work` settled within `ms` (its failure is thrown; a failure after the timeout is dropped). */
async function untilOrTimeout(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const done = work.then(() => true as const);
  // The PAUSE given up on fails when its session is closed: nobody waits for it then, and an
  // unhandled rejection would end the worker.
  done.catch(() => undefined);
  try {
    return await Promise.race([done, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/** The target as PgBouncer should reach it: from the target connection's URL on this worker. */
function entryServer(url: string): EntryServer {
  const parsed = new URL(url);
  const user = decodeURIComponent(parsed.username);
  const password = decodeURIComponent(parsed.password);
  return {
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1') || 'localhost',
    port: Number(parsed.port || 5432),
    dbname: decodeURIComponent(parsed.pathname.slice(1)) || user || 'postgres',
    ...(user ? { user } : {}),
    ...(password ? { password } : {}),
  };
}

async function readConfig(ref: PoolRef): Promise<string> {
  let text: string;
  try {
    text = await readFile(ref.configFile, 'utf8');
  } catch (err) {
    throw switchRefusal(
      `configFile: cannot read ${ref.configFile} on the switch worker's host (${(err as NodeJS.ErrnoException).code ?? 'error'}): run the switch worker beside PgBouncer and give the file its configuration %includes`,
    );
  }
  if (!findEntry(text, ref.database)) {
    throw switchRefusal(`configFile: ${ref.configFile} has no entry for database ${ref.database}: put the pooled database's entry (${ref.database} = host=… dbname=…) in that file`);
  }
  return text;
}

/**
 * Written beside the file and renamed over it: PgBouncer never reads half of it. The new file
 * keeps the old one's mode and, where this worker may give it (root), its owner: a file only
 * PgBouncer's user may read stays readable to it.
 */
async function replaceFile(path: string, text: string): Promise<void> {
  const before = await stat(path);
  const next = `${path}.ferry-next`;
  await writeFile(next, text, { mode: before.mode & 0o777 });
  await chown(next, before.uid, before.gid).catch(() => undefined);
  await rename(next, path);
}

async function expectEntry(console: Client, database: string, server: EntryServer): Promise<void> {
  const { rows } = await console.query<{ name: string; host: string; port: string; database: string }>('SHOW DATABASES');
  const row = rows.find((r) => r.name === database);
  if (!row || row.host !== server.host || Number(row.port) !== server.port || row.database !== server.dbname) {
    // The file may not be the one PgBouncer includes, or an error in it kept the old entry.
    throw switchRefusal(
      `configFile: after RELOAD PgBouncer's ${database} still points at ${row ? `${row.host}:${row.port}/${row.database}` : 'nothing'}: ` +
        "check that configFile is the file PgBouncer's configuration %includes and that PgBouncer's log shows no error",
    );
  }
}
