/**
 * The migration spec's zod schema (src/core/spec.ts parses with it). A module of its own, loaded
 * on first use: every workflow execution evaluates the modules its bundle imports as it starts,
 * and building the schemas of specs, plans and change plans, with zod itself, cost each table
 * workflow about 25 ms of CPU where only the migration's own parse needs them.
 */
import { z } from 'zod';
import { parseDuration } from './duration';
import { displayQualified, parseQualifiedName, QualifiedName, sameName } from './identifiers';
import { isPattern, parseTablePattern } from './table-patterns';
import { BATCH_ROWS, CALLBACK_SECRET_NAME, CHUNKS, MAX_APPLY_LANES, MAX_METADATA_BYTES, MAX_TABLES, PARALLELISM } from './spec-limits';

const connectionName = z
  .string()
  .regex(/^[A-Za-z][A-Za-z0-9_-]{0,62}$/, {
    error:
      'must be a connection name (letters, digits, _ or -), resolved on the workers through ' +
      'FERRY_CONN_<NAME>; never a URL or a password',
  });

const qualifiedName = z.string().superRefine((text, ctx) => {
  const parsed = parseQualifiedName(text);
  if (typeof parsed === 'string') ctx.addIssue({ code: 'custom', message: parsed });
});

const duration = (min: number, max: number) =>
  z.string().superRefine((text, ctx) => {
    const ms = parseDuration(text);
    if (ms === undefined) {
      ctx.addIssue({ code: 'custom', message: 'must be a duration such as 90s, 30m, 12h or 1h30m' });
    } else if (ms < min || ms > max) {
      ctx.addIssue({ code: 'custom', message: `must be between ${min / 1000}s and ${max / 86_400_000}d` });
    }
  });

const int = (min: number, max: number) => z.number().int().min(min).max(max);

/** An http(s) URL Ferry POSTs to, signed with the secret named at `secretField`. */
const postUrl = (secretField: string) =>
  z
    .string()
    .max(2048)
    .refine((u) => isHttpUrl(u), { error: 'must be an http:// or https:// URL (no spaces or control characters)' })
    .refine((u) => !hasCredentials(u), {
      error: `must not carry a user or password (they would be stored in workflow history); sign requests with ${secretField} instead`,
    });

const secretName = z.string().regex(CALLBACK_SECRET_NAME, {
  error:
    "must be the name of a workers' environment variable that starts with FERRY_SECRET_ (A-Z, 0-9, _; for example " +
    'FERRY_SECRET_HOOK), never the secret itself: workers sign only with FERRY_SECRET_* variables; rename the ' +
    'variable on the workers and here',
});

/** The result callback, shared by migration specs and change plans. */
export const callbackSchema = z
  .strictObject({
    url: postUrl('callback.secret').describe('http(s) URL that receives the result document (POST JSON)'),
    secret: secretName
      .optional()
      .describe('NAME of the workers\' variable FERRY_SECRET_<NAME> that holds the HMAC-SHA256 key (X-Ferry-Signature)'),
    events: z.boolean().default(false).describe('also POST every event, keyed <id>:<seq>'),
  })
  .optional()
  .describe('result callback, sent for every outcome');

/** A Temporal task queue's name, as `ferry worker --task-queue` takes it. */
const taskQueueName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/, {
  error: 'must be 1-200 letters, digits, ".", "_" or "-", starting with a letter or digit: the queue `ferry worker --task-queue` serves beside the pooler',
});

/**
 * cutover.switch: who moves the application's connections to the target during the cutover —
 * PgBouncer (paused, repointed, resumed by a worker beside it) or any switcher behind a webhook.
 */
const switchSchema = z
  .strictObject({
    pgbouncer: z
      .strictObject({
        admin: connectionName.describe("connection name of PgBouncer's admin console (FERRY_CONN_<NAME> on the switch worker: postgres://user@host:port/pgbouncer)"),
        database: z
          .string()
          .regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$/, { error: 'must be the name of a database in PgBouncer\'s [databases] section (letters, digits, "_", ".", "-")' })
          .describe('the pooled database the application connects to'),
        configFile: z
          .string()
          .max(1024)
          .regex(/^\/[^\0\n]*$/, { error: 'must be an absolute path on the pooler\'s host: the file PgBouncer\'s configuration %includes with this database\'s entry' })
          .describe("the file PgBouncer's configuration %includes that holds this database's entry; the switch worker rewrites the entry"),
        taskQueue: taskQueueName.describe('the task queue the switch worker beside PgBouncer serves (`ferry worker --task-queue …`)'),
      })
      .optional(),
    webhook: z
      .strictObject({
        url: postUrl('cutover.switch.webhook.secret').describe('receives a signed POST at paused, switched (and reverted on a rollback after paused); answers 2xx when done'),
        secret: secretName.describe("NAME of the workers' variable FERRY_SECRET_<NAME> that holds the HMAC-SHA256 key (X-Ferry-Signature)"),
        timeout: duration(1000, 10 * 60_000).default('30s').describe('how long each request may take before the cutover rolls back'),
      })
      .optional(),
  })
  .superRefine((value, ctx) => {
    const kinds = [value.pgbouncer, value.webhook].filter((kind) => kind !== undefined).length;
    if (kinds !== 1) ctx.addIssue({ code: 'custom', message: 'give exactly one switcher: pgbouncer: {admin, database, configFile, taskQueue} or webhook: {url, secret, timeout}' });
  })
  .optional()
  .describe("optional: who moves the application's connections to the target during the cutover");

/** schema.table, or a pattern (`public.*`, `billing.invoice_*`, `*.*`, `all`). */
const nameOrPattern = z.string().superRefine((text, ctx) => {
  const parsed = isPattern(text) ? parseTablePattern(text) : parseQualifiedName(text);
  if (typeof parsed === 'string') ctx.addIssue({ code: 'custom', message: parsed });
});

const pattern = z.string().superRefine((text, ctx) => {
  const parsed = parseTablePattern(text);
  if (typeof parsed === 'string') ctx.addIssue({ code: 'custom', message: parsed });
});

const tableEntry = z.union([
  nameOrPattern,
  z.strictObject({
    name: qualifiedName.describe('source table, schema-qualified (quoted identifiers allowed: app."Order Lines")'),
    target: qualifiedName.optional().describe('target table; default: the same name'),
    chunks: int(CHUNKS.min, CHUNKS.max).optional().describe('parallel primary-key ranges; default: from the estimated size'),
  }),
]);

export const specSchema = z
  .strictObject({
    id: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, {
        error: 'must be 1-100 letters, digits, ".", "_" or "-", starting with a letter or digit',
      })
      .optional()
      .describe('migration id = workflow id; generated when absent'),
    source: connectionName.describe('connection name; workers resolve FERRY_CONN_<NAME> to a postgres URL'),
    target: connectionName.describe('connection name of the target database'),
    mode: z.enum(['full', 'online']).default('full').describe('full: the source is quiet; online: it keeps taking writes'),
    tables: z
      .union([z.literal('all'), z.array(tableEntry).min(1).max(MAX_TABLES)])
      .describe(
        'all, or a list of "schema.table", patterns ("public.*", "billing.invoice_*", "*.*": * and ? in either part; system schemas and _ferry* never chosen) and {name, target?, chunks?} (overrides what a pattern chose for that table)',
      ),
    exclude: z.array(pattern).min(1).max(MAX_TABLES).optional().describe('patterns of tables the tables: patterns must not choose'),
    objects: z
      .enum(['tables', 'all'])
      .default('tables')
      .describe(
        'tables: only the tables (and their keys, indexes, foreign keys, sequences); all: also the chosen schemas\' other objects — extensions, types, functions, views, materialized views, triggers, rules, policies, comments, grants, ownership — from the source\'s own pg_dump',
      ),
    truncate: z.boolean().default(false).describe('allow a non-empty existing target table to be replaced'),
    batchRows: int(BATCH_ROWS.min, BATCH_ROWS.max)
      .optional()
      .describe('rows per copy batch (one target transaction); absent: batches of about 64 MB of rows, by the table\'s row width'),
    validation: z.enum(['none', 'count', 'checksum']).default('checksum').describe('how copied data is proven equal'),
    parallelism: z
      .strictObject({
        tables: int(1, PARALLELISM.max)
          .default(PARALLELISM.tables)
          .describe('tables copied at once (full mode: a small table, one chunk of at most 100,000 estimated rows, takes a quarter of a slot)'),
        chunks: int(1, PARALLELISM.max).default(PARALLELISM.chunks).describe('chunk copies at once per table'),
        indexes: int(1, PARALLELISM.max).default(PARALLELISM.indexes).describe('index and constraint builds at once per table (and foreign-key validations at once)'),
        apply: int(1, MAX_APPLY_LANES)
          .default(PARALLELISM.apply)
          .describe('online: sessions applying one table\'s changes at once, each its share of the keys by key hash'),
      })
      .optional()
      .describe('raise chunks when the databases have cores to spare'),
    cutover: z
      .strictObject({
        approval: z
          .enum(['auto', 'manual', 'event'])
          .default('auto')
          .describe('manual waits for `ferry approve ID` (signal approveCutover); event also takes a signed message on ferry.control.<id>.approve (NATS, FERRY_NATS_URL)'),
        approvalSecret: secretName
          .optional()
          .describe("approval: event — NAME of the workers' variable FERRY_SECRET_<NAME> whose key signs approval messages (X-Ferry-Signature over the body)"),
        approvalTimeout: duration(1000, 30 * 86_400_000).default('24h').describe('then the migration rolls back'),
        afterwards: z.enum(['keep-frozen', 'unfreeze']).default('keep-frozen').describe('whether the source stays write-frozen after cutover'),
        maxWait: duration(1000, 7 * 86_400_000)
          .default('5m')
          .describe('how long the cutover waits for write transactions that were open when writes were frozen'),
        onBlocked: z
          .enum(['rollback', 'terminate', 'wait'])
          .default('rollback')
          .describe('after maxWait: roll the migration back, end the blocking sessions (pg_terminate_backend), or keep waiting'),
        switch: switchSchema,
      })
      .optional()
      .describe('online mode only'),
    capture: z
      .enum(['auto', 'trigger', 'logical'])
      .optional()
      .describe(
        'online mode only. How changes are captured: trigger (row triggers write the changed keys), logical (a publication and a ' +
          'logical replication slot, nothing on the write path; needs wal_level=logical, a free slot and REPLICATION or superuser), ' +
          'auto (default: logical where the source allows it, else trigger; preflight says which and why)',
      ),
    onFailure: z.enum(['rollback', 'keep']).default('rollback').describe('keep leaves target tables, checkpoints and (online, when FAILED) change capture for inspection and `ferry retry`; `ferry cleanup` removes them'),
    deadline: duration(1000, 365 * 86_400_000).optional().describe('e.g. 12h; then TIMED_OUT and rollback'),
    callback: callbackSchema,
    metadata: z.record(z.string(), z.unknown()).optional().describe('free JSON (at most 16 KB), echoed in the result and callback'),
  })
  .superRefine((spec, ctx) => {
    if (spec.mode === 'full' && spec.cutover !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['cutover'],
        message: 'applies only to mode: online; remove it or set mode: online',
      });
    }
    if (spec.cutover?.approval === 'event' && spec.cutover.approvalSecret === undefined) {
      ctx.addIssue({ code: 'custom', path: ['cutover', 'approvalSecret'], message: 'is required with approval: event: name the FERRY_SECRET_* variable whose key signs approval messages' });
    }
    if (spec.cutover?.approvalSecret !== undefined && spec.cutover.approval !== 'event') {
      ctx.addIssue({ code: 'custom', path: ['cutover', 'approvalSecret'], message: 'applies only to approval: event; remove it or set approval: event' });
    }
    if (spec.mode === 'full' && spec.capture !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['capture'],
        message: 'applies only to mode: online (full mode captures nothing); remove it or set mode: online',
      });
    }
    if (spec.metadata !== undefined) {
      const bytes = jsonBytes(spec.metadata);
      if (bytes === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['metadata'],
          message: 'must be plain JSON data: no self-references (YAML aliases to itself) and no absurd nesting',
        });
      } else if (bytes > MAX_METADATA_BYTES) {
        ctx.addIssue({
          code: 'custom',
          path: ['metadata'],
          message: `must serialise to at most ${MAX_METADATA_BYTES} bytes of JSON (it has ${bytes}); keep large data elsewhere and put a reference here`,
        });
      }
    }
    const entries = spec.tables === 'all' ? [] : spec.tables;
    if (spec.exclude !== undefined && spec.tables !== 'all' && !entries.some((e) => typeof e === 'string' && isPattern(e))) {
      ctx.addIssue({
        code: 'custom',
        path: ['exclude'],
        message: 'takes tables out of what tables: patterns choose, and tables: names no pattern; remove exclude, or choose tables with a pattern (public.*, all)',
      });
    }
    const seenSources = new Map<string, number>();
    const seenTargets = new Map<string, number>();
    entries.forEach((entry, index) => {
      const names = entryNames(entry);
      if (!names) return;
      const sourceKey = displayQualified(names.source);
      const targetKey = displayQualified(names.target);
      if (seenSources.has(sourceKey)) {
        ctx.addIssue({
          code: 'custom',
          path: ['tables', index],
          message: `lists ${sourceKey} again (already tables[${seenSources.get(sourceKey)}]); list each table once`,
        });
      }
      if (seenTargets.has(targetKey) && !seenSources.has(sourceKey)) {
        ctx.addIssue({
          code: 'custom',
          path: ['tables', index],
          message: `targets ${targetKey}, which tables[${seenTargets.get(targetKey)}] targets too; give each table its own target`,
        });
      }
      seenSources.set(sourceKey, index);
      seenTargets.set(targetKey, index);
      if (spec.source === spec.target && sameName(names.source, names.target)) {
        ctx.addIssue({
          code: 'custom',
          path: ['tables', index],
          message: `source and target are the same table (${sourceKey} on connection ${spec.source}); use a different target connection or a target name`,
        });
      }
    });
  });

export type ParsedSpec = z.output<typeof specSchema>;

/** The whole text, not just its start: a newline or space could smuggle a second value past a prefix check. */
function isHttpUrl(text: string): boolean {
  return /^https?:\/\/[^\s\p{Cc}/?#]+(?:[/?#][^\s\p{Cc}]*)?$/iu.test(text);
}

function hasCredentials(text: string): boolean {
  return /^https?:\/\/[^/?#]*@/i.test(text);
}

/** UTF-8 size of the value as JSON, or undefined when it has no JSON form (cycles, nesting deep enough to overflow the stack). */
function jsonBytes(value: unknown): number | undefined {
  try {
    return new TextEncoder().encode(JSON.stringify(value)).length;
  } catch {
    return undefined;
  }
}

export function entryNames(entry: Exclude<ParsedSpec['tables'], 'all'>[number]): { source: QualifiedName; target: QualifiedName } | undefined {
  if (typeof entry === 'string' && isPattern(entry)) return undefined;
  const sourceText = typeof entry === 'string' ? entry : entry.name;
  const targetText = typeof entry === 'string' ? entry : (entry.target ?? entry.name);
  const source = parseQualifiedName(sourceText);
  const target = parseQualifiedName(targetText);
  if (typeof source === 'string' || typeof target === 'string') return undefined;
  return { source, target };
}

/** The spec's JSON Schema as zod writes it (src/core/spec.ts specJsonSchema adds the id and title). */
export function specJsonSchemaBody(): Record<string, unknown> {
  return z.toJSONSchema(specSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
}
