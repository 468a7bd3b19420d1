/**
 * Change plans (docs/architecture.md §10): in-place schema changes on one database, as steps run
 * in order — `sql`, `backfill`, `index`, `validate`. A zod schema for what people write and its
 * normalised form for the workflow. Pure module: changeWorkflow validates its own input with it,
 * since any Temporal client can start it. What a statement does to a table (a rewrite, a scan
 * under ACCESS EXCLUSIVE) needs PostgreSQL's parser and catalog: preflight judges that.
 */
import { z } from 'zod';
import { formatDuration, parseDuration } from './duration';
import { SpecError, SpecProblem } from './errors';
import { parseIdentifier, parseQualifiedName, QualifiedName } from './identifiers';
import { callbackSchema } from './spec';

export const CHANGE_LIMITS = {
  steps: 200,
  sqlChars: 65_536,
  expressionChars: 4_096,
  setColumns: 64,
  alterClauses: 64,
  indexColumns: 32,
  backfillBatchRows: { min: 100, max: 100_000, default: 5_000 },
};
export const STEP_KINDS = ['sql', 'backfill', 'index', 'validate', 'rewrite'] as const;
export type StepKind = (typeof STEP_KINDS)[number];
export const ON_FAILURE = ['rollback', 'pause', 'fail'] as const;
export type OnFailure = (typeof ON_FAILURE)[number];

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

const stepSchema = z.union([sqlStep, backfillStep, indexStep, validateStep, rewriteStep]);

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

export type ChangePlanInput = z.input<typeof changePlanSchema>;

interface StepCommon {
  index: number;
  timeoutMs: number;
  onFailure: OnFailure;
}

export interface SqlStep extends StepCommon {
  kind: 'sql';
  sql: string;
  down?: string;
  lockTimeoutMs: number;
  maxWaitMs: number;
}

export interface BackfillStep extends StepCommon {
  kind: 'backfill';
  table: QualifiedName;
  /** Column (unquoted, as stored in the catalog) → SQL expression. */
  set: { column: string; expression: string }[];
  where?: string;
  batchRows: number;
  until: 'once' | 'all';
}

export interface IndexStep extends StepCommon {
  kind: 'index';
  table: QualifiedName;
  name: string;
  columns: string[];
  unique: boolean;
  using: 'btree' | 'hash' | 'gist' | 'gin' | 'brin';
  where?: string;
  rebuild: boolean;
}

export interface ValidateStep extends StepCommon {
  kind: 'validate';
  table: QualifiedName;
  constraint: string;
}

export interface RewriteStep extends StepCommon {
  kind: 'rewrite';
  table: QualifiedName;
  alter: string[];
  /** New column (unquoted) → SQL expression over the old row. */
  columns: { column: string; expression: string }[];
  approval: 'auto' | 'manual';
  keepOldMs: number;
  lockTimeoutMs: number;
  maxWaitMs: number;
}

export type ChangeStep = SqlStep | BackfillStep | IndexStep | ValidateStep | RewriteStep;

export interface ThrottleSettings {
  rowsPerSecond?: number;
  maxReplicaLagMs?: number;
  maxActiveSessions?: number;
}

/** The normalised plan: names parsed, durations in milliseconds, per-step defaults applied. */
export interface ChangePlan {
  kind: 'change';
  id?: string;
  database: string;
  steps: ChangeStep[];
  throttle: ThrottleSettings;
  onFailure: OnFailure;
  callback?: { url: string; secret?: string; events: boolean };
  metadata?: Record<string, unknown>;
}

/** True when a decoded spec file asks for a change plan rather than a migration. */
export function isChangePlanInput(input: unknown): boolean {
  return input !== null && typeof input === 'object' && !Array.isArray(input) && (input as { kind?: unknown }).kind === 'change';
}

/**
 * Refusals zod would word poorly: a step that names no kind or a kind Ferry has not got, a step
 * aimed at another database. Checked before the schema so each says what to do instead.
 */
function stepShapeProblems(input: unknown): SpecProblem[] {
  const steps = (input as { steps?: unknown })?.steps;
  if (!Array.isArray(steps)) return [];
  const problems: SpecProblem[] = [];
  const database = (input as { database?: unknown }).database;
  steps.forEach((step, index) => {
    const path = `steps[${index}]`;
    if (step === null || typeof step !== 'object' || Array.isArray(step)) {
      problems.push({ path, message: `must be a mapping with one of ${STEP_KINDS.join(', ')}` });
      return;
    }
    const keys = Object.keys(step);
    if ('database' in step || 'connection' in step) {
      const named = (step as { database?: unknown; connection?: unknown }).database ?? (step as { connection?: unknown }).connection;
      problems.push({
        path: `${path}.${'database' in step ? 'database' : 'connection'}`,
        message: `a change plan works on its one database (database: ${String(database)}); a step cannot name another (${JSON.stringify(named)}): make a separate plan for it`,
      });
      return;
    }
    const kinds = keys.filter((k) => (STEP_KINDS as readonly string[]).includes(k));
    if (kinds.length === 0) {
      problems.push({ path, message: `unknown step kind (${keys.map((k) => `"${k}"`).join(', ') || 'no keys'}); a step is one of ${STEP_KINDS.join(', ')}` });
    } else if (kinds.length > 1) {
      problems.push({ path, message: `names several step kinds (${kinds.join(', ')}); give each its own step` });
    }
  });
  return problems;
}

function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return 'plan';
  return path.map((part, i) => (typeof part === 'number' ? `[${part}]` : `${i === 0 ? '' : '.'}${String(part)}`)).join('');
}

type Issue = z.core.$ZodIssue;

/** Of a union's branches, the one for the step's kind (the others only say its key is unknown). */
function flatten(issues: readonly Issue[], prefix: PropertyKey[] = []): { path: PropertyKey[]; issue: Issue }[] {
  return issues.flatMap((issue) => {
    const path = [...prefix, ...issue.path];
    if (issue.code === 'invalid_union' && issue.errors.length > 0) {
      const branches = issue.errors.filter((branch) => !branch.some((i) => i.code === 'unrecognized_keys' && i.path.length === 0));
      if (branches.length > 0) return flatten(branches[0], path);
    }
    return [{ path, issue }];
  });
}

const plainMessage: z.core.$ZodErrorMap = (issue) => {
  if (issue.code !== 'invalid_type') return undefined;
  if (issue.input === undefined) return 'is required';
  if (issue.expected === 'int') return 'must be a whole number';
  return undefined;
};

/** Validates a decoded change plan and returns its normalised form, or throws SpecError. */
export function parseChangePlan(input: unknown): ChangePlan {
  const early = stepShapeProblems(input);
  if (early.length) throw new SpecError(early);
  const result = changePlanSchema.safeParse(input, { error: plainMessage });
  if (!result.success) throw new SpecError(schemaProblems(result.error.issues));
  const p = result.data;
  const planTimeout = parseDuration(p.timeout)!;
  return {
    kind: 'change',
    id: p.id,
    database: p.database,
    steps: p.steps.map((step, index) => normaliseStep(step, index, planTimeout, p.onFailure)),
    throttle: {
      rowsPerSecond: p.throttle?.rowsPerSecond || undefined,
      maxReplicaLagMs: p.throttle?.maxReplicaLag === undefined ? undefined : parseDuration(p.throttle.maxReplicaLag),
      maxActiveSessions: p.throttle?.maxActiveSessions,
    },
    onFailure: p.onFailure,
    callback: p.callback,
    metadata: p.metadata,
  };
}

/** The schema's issues as problems: one per path, an unknown key pointing at the published schema. */
function schemaProblems(issues: readonly Issue[]): SpecProblem[] {
  return flatten(issues).map(({ path, issue }) => ({
    path: formatPath(path),
    message:
      issue.code === 'unrecognized_keys'
        ? `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}; see schema/ferry-change.schema.json`
        : issue.message,
  }));
}

type ParsedStep = z.output<typeof stepSchema>;

/** A parsed step in its normalised form: durations in milliseconds, names parsed, the plan's defaults filled in. */
function normaliseStep(step: ParsedStep, index: number, planTimeout: number, planOnFailure: OnFailure): ChangeStep {
  const base = {
    index,
    timeoutMs: step.timeout === undefined ? planTimeout : parseDuration(step.timeout)!,
    onFailure: step.onFailure ?? planOnFailure,
  };
  if ('sql' in step) {
    return { ...base, kind: 'sql', sql: step.sql, down: step.down, lockTimeoutMs: parseDuration(step.lockTimeout)!, maxWaitMs: parseDuration(step.maxWait)! };
  }
  if ('backfill' in step) {
    const b = step.backfill;
    return {
      ...base,
      kind: 'backfill',
      table: parseQualifiedName(b.table) as QualifiedName,
      set: Object.entries(b.set).map(([column, expression]) => ({ column: identifierName(column), expression })),
      where: b.where,
      batchRows: b.batchRows,
      until: b.until,
    };
  }
  if ('index' in step) {
    const i = step.index;
    return {
      ...base,
      kind: 'index',
      table: parseQualifiedName(i.table) as QualifiedName,
      name: identifierName(i.name),
      columns: (i.columns ?? []).map(identifierName),
      unique: i.unique,
      using: i.using,
      where: i.where,
      rebuild: i.rebuild,
    };
  }
  if ('rewrite' in step) {
    const r = step.rewrite;
    return {
      ...base,
      kind: 'rewrite',
      table: parseQualifiedName(r.table) as QualifiedName,
      alter: r.alter,
      columns: Object.entries(r.columns ?? {}).map(([column, expression]) => ({ column: identifierName(column), expression })),
      approval: r.approval,
      keepOldMs: parseDuration(r.keepOld)!,
      lockTimeoutMs: parseDuration(r.lockTimeout)!,
      maxWaitMs: parseDuration(r.maxWait)!,
    };
  }
  return {
    ...base,
    kind: 'validate',
    table: parseQualifiedName(step.validate.table) as QualifiedName,
    constraint: identifierName(step.validate.constraint),
  };
}

function identifierName(text: string): string {
  const parsed = parseIdentifier(text);
  if (!parsed.ok) throw new Error(`unchecked identifier ${text}`);
  return parsed.name;
}

/** The JSON Schema published for non-TypeScript callers (schema/ferry-change.schema.json). */
export function changePlanJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(changePlanSchema, { io: 'input', unrepresentable: 'any' }),
    $id: 'https://github.com/ferry/ferry/schema/ferry-change.schema.json',
    title: 'Ferry change plan',
  };
}

/** `steps[2] index public.orders orders_note_idx`: how status lines and errors name a step. */
export function stepLabel(step: ChangeStep): string {
  const table = (q: QualifiedName) => `${q.schema}.${q.name}`;
  switch (step.kind) {
    case 'sql':
      return `sql: ${step.sql.replace(/\s+/g, ' ').trim().slice(0, 80)}`;
    case 'backfill':
      return `backfill ${table(step.table)} (${step.set.map((s) => s.column).join(', ')})`;
    case 'index':
      return `index ${step.name} on ${table(step.table)}${step.rebuild ? ' (rebuild)' : ''}`;
    case 'validate':
      return `validate ${step.constraint} on ${table(step.table)}`;
    case 'rewrite':
      return `rewrite ${table(step.table)} (${step.alter.join(', ').replace(/\s+/g, ' ').slice(0, 80)})`;
  }
}

/** The capture of a rewrite step is keyed like a migration's (activities/capture.ts): one id per step. */
export function rewriteCaptureId(changeId: string, step: number): string {
  return `${changeId}#rewrite${step}`;
}

/** The capture that follows a rewrite's new table from the swap on, for a revert within keepOld. */
export function revertCaptureId(changeId: string, step: number): string {
  return `${rewriteCaptureId(changeId, step)}-revert`;
}
