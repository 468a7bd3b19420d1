/**
 * Change plans (docs/architecture.md §10): in-place schema changes on one database, as steps run
 * in order — `sql`, `backfill`, `index`, `validate`. A zod schema for what people write
 * (src/core/change-plan-schema.ts) and its normalised form for the workflow. Pure module: changeWorkflow validates its own input with it,
 * since any Temporal client can start it. What a statement does to a table (a rewrite, a scan
 * under ACCESS EXCLUSIVE) needs PostgreSQL's parser and catalog: preflight judges that.
 */
import type { z } from 'zod';
import { parseDuration } from './duration';
import { SpecError, SpecProblem } from './errors';
import { parseIdentifier, parseQualifiedName, QualifiedName } from './identifiers';
import { OnFailure, STEP_KINDS } from './change-limits';

export * from './change-limits';

/** The schema module, loaded on first use (src/core/spec-schema.ts says why). */
const schemas = (): typeof import('./change-plan-schema') => require('./change-plan-schema');

export type ChangePlanInput = z.input<typeof import('./change-plan-schema').changePlanSchema>;

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
  /** statement_timeout of the statement and of its down: (never more than the step's timeout). */
  statementTimeoutMs: number;
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
  const result = schemas().changePlanSchema.safeParse(input, { error: plainMessage });
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

type ParsedStep = z.output<typeof import('./change-plan-schema').stepSchema>;

/** A parsed step in its normalised form: durations in milliseconds, names parsed, the plan's defaults filled in. */
function normaliseStep(step: ParsedStep, index: number, planTimeout: number, planOnFailure: OnFailure): ChangeStep {
  const base = {
    index,
    timeoutMs: step.timeout === undefined ? planTimeout : parseDuration(step.timeout)!,
    onFailure: step.onFailure ?? planOnFailure,
  };
  if ('sql' in step) {
    return {
      ...base,
      kind: 'sql',
      sql: step.sql,
      down: step.down,
      lockTimeoutMs: parseDuration(step.lockTimeout)!,
      maxWaitMs: parseDuration(step.maxWait)!,
      statementTimeoutMs: Math.min(parseDuration(step.statementTimeout)!, base.timeoutMs),
    };
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
  if ('index' in step) return { ...base, ...indexStep(step.index) };
  if ('rewrite' in step) return { ...base, ...rewriteStep(step.rewrite) };
  return {
    ...base,
    kind: 'validate',
    table: parseQualifiedName(step.validate.table) as QualifiedName,
    constraint: identifierName(step.validate.constraint),
  };
}

type ParsedIndex = Extract<ParsedStep, { index: unknown }>['index'];
type ParsedRewrite = Extract<ParsedStep, { rewrite: unknown }>['rewrite'];

function indexStep(i: ParsedIndex): Omit<Extract<ChangeStep, { kind: 'index' }>, 'index' | 'timeoutMs' | 'onFailure'> {
  return {
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

function rewriteStep(r: ParsedRewrite): Omit<Extract<ChangeStep, { kind: 'rewrite' }>, 'index' | 'timeoutMs' | 'onFailure'> {
  return {
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

function identifierName(text: string): string {
  const parsed = parseIdentifier(text);
  if (!parsed.ok) throw new Error(`unchecked identifier ${text}`);
  return parsed.name;
}

/** The JSON Schema published for non-TypeScript callers (schema/ferry-change.schema.json). */
export function changePlanJsonSchema(): Record<string, unknown> {
  return {
    ...schemas().changePlanJsonSchemaBody(),
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
