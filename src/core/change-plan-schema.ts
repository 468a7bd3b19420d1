/**
 * The change plan's zod schema (src/core/change-plan.ts parses with it), loaded on first use for
 * the reason src/core/spec-schema.ts gives.
 */
import { z } from 'zod';
import { CHANGE_LIMITS, ON_FAILURE } from './change-limits';
import { formatDuration, parseDuration } from './duration';
import { parseIdentifier, parseQualifiedName } from './identifiers';
import { callbackSchema } from './spec-schema';

const connectionName = z.string().regex(/^[A-Za-z][A-Za-z0-9_-]{0,62}$/, {
  error: 'must be a connection name (letters, digits, _ or -), resolved on the workers through FERRY_CONN_<NAME>; never a URL or a password',
});

const qualifiedName = z.string().superRefine((text, ctx) => {
  const parsed = parseQualifiedName(text);
  if (typeof parsed === 'string') ctx.addIssue({ code: 'custom', message: parsed });
});

const identifier = z.string().superRefine((text, ctx) => {
  const parsed = parseIdentifier(text);
  if (!parsed.ok) ctx.addIssue({ code: 'custom', message: parsed.message });
});

const duration = (min: number, max: number) =>
  z.string().superRefine((text, ctx) => {
    const ms = parseDuration(text);
    if (ms === undefined) ctx.addIssue({ code: 'custom', message: 'must be a duration such as 2s, 30m or 1h30m' });
    else if (ms < min || ms > max) ctx.addIssue({ code: 'custom', message: `must be between ${formatDuration(min)} and ${formatDuration(max)}` });
  });

/** SQL text: a bounded string without NUL (PostgreSQL refuses it, and it hides what follows). */
const sqlText = (max: number) =>
  z
    .string()
    .min(1)
    .max(max)
    .refine((s) => !s.includes('\u0000'), { error: 'must not contain a NUL character' });

const common = {
  timeout: duration(1000, 30 * 86_400_000).optional().describe("this step's time limit (default: the plan's timeout)"),
  onFailure: z.enum(ON_FAILURE).optional().describe("what a failure of this step does (default: the plan's onFailure)"),
};

const sqlStep = z.strictObject({
  sql: sqlText(CHANGE_LIMITS.sqlChars).describe('one DDL statement; preflight refuses forms that rewrite or scan a table under an exclusive lock, naming the safe form'),
  down: sqlText(CHANGE_LIMITS.sqlChars).optional().describe('one statement that undoes it, run when the plan rolls back'),
  lockTimeout: duration(100, 60_000).default('2s').describe('lock_timeout per attempt, so a waiting ALTER never stalls the writers queued behind it'),
  maxWait: duration(1000, 7 * 86_400_000).default('10m').describe('how long attempts are retried (backoff with jitter) while the lock is busy'),
  statementTimeout: duration(100, 30 * 86_400_000)
    .default('1m')
    .describe("statement_timeout of the statement and of its down: (a catalog-only change takes milliseconds once its lock is granted); raise it for a step that must work through rows"),
  ...common,
});

const backfillStep = z.strictObject({
  backfill: z.strictObject({
    table: qualifiedName.describe('schema.table; it needs a primary key (batches are keyset ranges of it)'),
    set: z
      .record(identifier, sqlText(CHANGE_LIMITS.expressionChars))
      .refine((o) => Object.keys(o).length >= 1 && Object.keys(o).length <= CHANGE_LIMITS.setColumns, {
        error: `must set 1 to ${CHANGE_LIMITS.setColumns} columns`,
      })
      .describe('column → SQL expression (of the row\'s own columns)'),
    where: sqlText(CHANGE_LIMITS.expressionChars).optional().describe('only rows matching this SQL condition are updated'),
    batchRows: z
      .number()
      .int()
      .min(CHANGE_LIMITS.backfillBatchRows.min)
      .max(CHANGE_LIMITS.backfillBatchRows.max)
      .default(CHANGE_LIMITS.backfillBatchRows.default)
      .describe('rows per batch; each batch and its checkpoint commit together'),
    until: z
      .enum(['once', 'all'])
      .default('once')
      .describe('once: one pass over the keys; all: passes until one updates nothing (needs where), which also catches rows inserted meanwhile'),
  }),
  ...common,
});

const indexStep = z.strictObject({
  index: z.strictObject({
    table: qualifiedName.describe('schema.table'),
    name: identifier.describe('index name (created in the table\'s schema)'),
    columns: z.array(identifier).min(1).max(CHANGE_LIMITS.indexColumns).optional().describe('key columns; required unless rebuild'),
    unique: z.boolean().default(false),
    using: z.enum(['btree', 'hash', 'gist', 'gin', 'brin']).default('btree'),
    where: sqlText(CHANGE_LIMITS.expressionChars).optional().describe('a partial index\'s condition'),
    rebuild: z.boolean().default(false).describe('REINDEX INDEX CONCURRENTLY an existing index instead of creating one'),
  }),
  ...common,
});

const validateStep = z.strictObject({
  validate: z.strictObject({
    table: qualifiedName.describe('schema.table'),
    constraint: identifier.describe('a CHECK or FOREIGN KEY constraint added NOT VALID'),
  }),
  ...common,
});

const rewriteStep = z.strictObject({
  rewrite: z.strictObject({
    table: qualifiedName.describe('schema.table to rebuild; it needs a primary key'),
    alter: z
      .array(sqlText(CHANGE_LIMITS.expressionChars))
      .min(1)
      .max(CHANGE_LIMITS.alterClauses)
      .describe('ALTER TABLE clauses (without "ALTER TABLE name"), applied to the shadow copy, e.g. "ALTER COLUMN abalance TYPE bigint"'),
    columns: z
      .record(identifier, sqlText(CHANGE_LIMITS.expressionChars))
      .optional()
      .describe("new column → SQL expression over the old row (default: the old column of the same name)"),
    approval: z.enum(['auto', 'manual']).default('auto').describe('manual: the swap waits for approveCutover (ferry approve ID)'),
    keepOld: duration(0, 30 * 86_400_000).default('24h').describe('how long the old table is kept after the swap before it is dropped'),
    lockTimeout: duration(100, 60_000).default('2s').describe("the swap's lock_timeout per attempt"),
    maxWait: duration(1000, 7 * 86_400_000).default('10m').describe('how long swap attempts are retried while the lock is busy'),
  }),
  ...common,
});

export const stepSchema = z.union([sqlStep, backfillStep, indexStep, validateStep, rewriteStep]);

export const changePlanSchema = z
  .strictObject({
    kind: z.literal('change').describe('a change plan (without kind: a migration spec)'),
    id: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, { error: 'must be 1-100 letters, digits, ".", "_" or "-", starting with a letter or digit' })
      .optional()
      .describe('change id = workflow id; generated when absent'),
    database: connectionName.describe('the one database the plan changes (FERRY_CONN_<NAME> on the workers)'),
    steps: z.array(stepSchema).min(1).max(CHANGE_LIMITS.steps).describe('run in order; each is sql, backfill, index, validate or rewrite'),
    throttle: z
      .strictObject({
        rowsPerSecond: z.number().int().min(0).max(100_000_000).optional().describe('backfill rate cap; 0 or absent: none (ferry throttle changes it)'),
        maxReplicaLag: duration(100, 86_400_000).optional().describe('backfills wait while a replica\'s replay lag (pg_stat_replication) exceeds this'),
        maxActiveSessions: z.number().int().min(1).max(100_000).optional().describe('backfills wait while more sessions than this are active'),
      })
      .optional(),
    onFailure: z.enum(ON_FAILURE).default('rollback').describe('rollback: undo completed steps (down:, indexes dropped) in reverse; pause: wait for ferry resume and retry the step; fail: stop'),
    timeout: duration(1000, 30 * 86_400_000).default('24h').describe('each step\'s time limit unless the step sets its own'),
    callback: callbackSchema,
    metadata: z.record(z.string(), z.unknown()).optional().describe('free JSON (at most 16 KB), echoed in the result and callback'),
  })
  .superRefine((plan, ctx) => {
    plan.steps.forEach((step, index) => {
      if ('backfill' in step && step.backfill.until === 'all' && step.backfill.where === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['steps', index, 'backfill', 'until'],
          message: 'until: all needs a where that the backfill makes false (e.g. "note IS NULL"), or no pass would ever find nothing',
        });
      }
      if ('index' in step && !step.index.rebuild && step.index.columns === undefined) {
        ctx.addIssue({ code: 'custom', path: ['steps', index, 'index', 'columns'], message: 'is required unless rebuild: true' });
      }
    });
    if (plan.metadata !== undefined) {
      let bytes: number | undefined;
      try {
        bytes = new TextEncoder().encode(JSON.stringify(plan.metadata)).length;
      } catch {
        bytes = undefined;
      }
      if (bytes === undefined || bytes > 16 * 1024) ctx.addIssue({ code: 'custom', path: ['metadata'], message: 'must be plain JSON of at most 16384 bytes' });
    }
  });

/** The plan's JSON Schema as zod writes it (src/core/change-plan.ts changePlanJsonSchema adds the id and title). */
export function changePlanJsonSchemaBody(): Record<string, unknown> {
  return z.toJSONSchema(changePlanSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
}
