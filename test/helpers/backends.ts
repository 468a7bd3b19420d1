/**
 * Database-side faults, from outside Ferry as a DBA would cause them: pg_terminate_backend of
 * Ferry's sessions (they set application_name, see src/worker.ts) when they run a given kind of
 * statement, and a database that refuses every connection for a while.
 */
import { Client } from 'pg';
import { adminUrl } from './databases';
import { sleep } from './chaos';

export const FERRY_APPLICATION_NAME = 'ferry-worker';

export interface Backend {
  pid: number;
  datname: string;
  state: string | null;
  /** The statement running, or the last one an idle session ran. */
  query: string;
}

export interface TerminationRule {
  label: string;
  matches(backend: Backend): boolean;
  /** How many rounds of terminations this rule may cause. */
  times: number;
  /** Pause after a round, so the retried work gets going before the next one. */
  gapMs: number;
  /** Only while this is true (e.g. "the throttle is still on"). */
  enabled?: () => boolean;
}

export interface Termination {
  label: string;
  at: number;
  pids: number[];
  queries: string[];
}

/**
 * Polls pg_stat_activity every `pollMs` for Ferry's sessions on the given databases and
 * terminates those a rule matches, `times` rounds per rule at most.
 */
export class BackendTerminator {
  readonly terminations: Termination[] = [];
  private running = true;
  private readonly loop: Promise<void>;

  private constructor(
    private readonly admin: Client,
    databases: string[],
    private readonly rules: TerminationRule[],
    pollMs: number,
  ) {
    const last = new Map<string, number>();
    this.loop = (async () => {
      while (this.running) {
        const { rows } = await admin.query<Backend>(
          // Active sessions only: an idle pooled session still shows the last statement it ran,
          // and ending it would count a round that hit no running activity.
          `SELECT pid, datname, state, query FROM pg_catalog.pg_stat_activity
            WHERE application_name = $1 AND datname = ANY ($2) AND pid <> pg_backend_pid() AND state = 'active'`,
          [FERRY_APPLICATION_NAME, databases],
        );
        for (const rule of this.rules) {
          if (this.count(rule.label) >= rule.times || Date.now() - (last.get(rule.label) ?? 0) < rule.gapMs) continue;
          if (rule.enabled && !rule.enabled()) continue;
          const victims = rows.filter((b) => rule.matches(b));
          if (victims.length === 0) continue;
          const killed = await admin.query<{ pid: number }>('SELECT pid FROM unnest($1::int[]) AS pid WHERE pg_catalog.pg_terminate_backend(pid)', [
            victims.map((v) => v.pid),
          ]);
          if (killed.rows.length === 0) continue;
          const pids = killed.rows.map((r) => r.pid);
          last.set(rule.label, Date.now());
          this.terminations.push({ label: rule.label, at: Date.now(), pids, queries: victims.filter((v) => pids.includes(v.pid)).map((v) => v.query.slice(0, 120)) });
        }
        await sleep(pollMs);
      }
    })();
  }

  static async start(databases: string[], rules: TerminationRule[], pollMs = 15): Promise<BackendTerminator> {
    const admin = new Client({ connectionString: adminUrl(), application_name: 'ferry-test-terminator' });
    await admin.connect();
    return new BackendTerminator(admin, databases, rules, pollMs);
  }

  count(label: string): number {
    return this.terminations.filter((t) => t.label === label).length;
  }

  /** Sessions terminated per rule, e.g. { copy: 5, validation: 3 }. */
  summary(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const rule of this.rules) out[rule.label] = this.terminations.filter((t) => t.label === rule.label).reduce((n, t) => n + t.pids.length, 0);
    return out;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop.catch(() => undefined);
    await this.admin.end().catch(() => undefined);
  }
}

/** What Ferry's statements look like in pg_stat_activity, by what they do. */
export const FerryStatements = {
  /** copyChunk (or repairRange): a key range streamed with COPY — not a list of keys as sync reads. */
  rangeCopy: (b: Backend) => /^COPY \(SELECT /.test(b.query) && !/= ANY \(|unnest\(/.test(b.query),
  /** syncChanges: reading, deleting and measuring the change log. */
  syncLog: (b: Backend) => /^(SELECT id, pk FROM|DELETE FROM|SELECT \(SELECT count\(\*\) FROM \(SELECT 1 FROM) "_ferry_capture"\."log_/.test(b.query),
  /** validateChunk or checksumBlocks: the count-and-checksum query, either side. */
  checksum: (b: Backend) => /hashtextextended\(ROW\(/.test(b.query),
};

/**
 * Makes `database` refuse every connection (ALLOW_CONNECTIONS false, existing sessions
 * terminated) until the returned function is called. Superusers are refused too.
 */
export async function refuseConnections(database: string, server = adminUrl()): Promise<{ terminated: number; restore: () => Promise<void> }> {
  const admin = new Client({ connectionString: server, application_name: 'ferry-test-outage' });
  await admin.connect();
  try {
    await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS false`);
    const { rows } = await admin.query<{ n: number }>(
      'SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid))::int AS n FROM pg_catalog.pg_stat_activity WHERE datname = $1',
      [database],
    );
    return {
      terminated: rows[0].n,
      restore: async () => {
        const again = new Client({ connectionString: server });
        await again.connect();
        try {
          await again.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`);
        } finally {
          await again.end();
        }
      },
    };
  } finally {
    await admin.end();
  }
}
