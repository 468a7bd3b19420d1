/**
 * The migration spec (docs/architecture.md §9): a zod schema (src/core/spec-schema.ts) for the
 * JSON/YAML a person or a service writes, and its normalised form that workflows and activities
 * use. Every refusal names the field (`tables[1].chunks: …`). Pure module: the workflow validates
 * its own input with it too, because Go and Python callers start `migrationWorkflow` without
 * Ferry's CLI.
 */
import type { z } from 'zod';
import { SpecError, SpecProblem } from './errors';
import { parseDuration } from './duration';
import { QualifiedName } from './identifiers';
import { isPattern, parseTablePattern, TablePattern } from './table-patterns';

import { BATCH_ROWS, PARALLELISM } from './spec-limits';

export * from './spec-limits';

/** The schema module, loaded on first use (src/core/spec-schema.ts says why). */
const schemas = (): typeof import('./spec-schema') => require('./spec-schema');

export type SpecInput = z.input<typeof import('./spec-schema').specSchema>;

export interface TableSpec {
  source: QualifiedName;
  target: QualifiedName;
  chunks?: number;
  /**
   * The spec field that named it (`tables[3]`), given when the spec has patterns too: its place
   * among the tables then differs from its place in the spec.
   */
  field?: string;
}

/** What a spec's patterns choose (src/core/table-patterns.ts); preflight lists the source's tables against them. */
export interface TableSelection {
  include: { field: string; pattern: TablePattern }[];
  exclude: TablePattern[];
}

export interface CutoverSpec {
  /** event: `manual`, and a signed message on ferry.control.<id>.approve approves too. */
  approval: 'auto' | 'manual' | 'event';
  /** approval: event — the FERRY_SECRET_* variable whose key signs approval messages. */
  approvalSecret?: string;
  approvalTimeoutMs: number;
  afterwards: 'keep-frozen' | 'unfreeze';
  maxWaitMs: number;
  onBlocked: 'rollback' | 'terminate' | 'wait';
  /** Who moves the application's connections to the target (docs/architecture.md, the switch); absent: nobody. */
  switch?: SwitchSpec;
}

/** PgBouncer paused, repointed and resumed by the worker serving `taskQueue` beside it. */
export interface PgBouncerSwitch {
  /** Connection name of PgBouncer's admin console. */
  admin: string;
  /** The pooled database the application connects to. */
  database: string;
  /** The file PgBouncer's configuration includes that holds the database's entry. */
  configFile: string;
  taskQueue: string;
}

/** Any other switcher: signed POSTs at paused, switched (and reverted), each answered 2xx within timeoutMs. */
export interface WebhookSwitch {
  url: string;
  secret: string;
  timeoutMs: number;
}

export type SwitchSpec = { pgbouncer: PgBouncerSwitch } | { webhook: WebhookSwitch };

export type CaptureChoice = 'auto' | 'trigger' | 'logical';

/** The normalised spec: names parsed, durations in milliseconds, defaults applied. */
export interface Spec {
  id?: string;
  source: string;
  target: string;
  mode: 'full' | 'online';
  /** The tables the spec names; with `selection`, those its patterns choose come after them. */
  tables: TableSpec[];
  /** The spec's patterns (`all`, `public.*`) and `exclude:`; absent when it names every table. */
  selection?: TableSelection;
  /**
   * `all`: the chosen schemas' other objects are made on the target too (src/db/schema-objects.ts);
   * absent for `tables`, the default.
   */
  objects?: 'all';
  truncate: boolean;
  /** Rows per copy batch; absent: sized by bytes (src/core/batch-size.ts). */
  batchRows?: number;
  validation: 'none' | 'count' | 'checksum';
  parallelism: { tables: number; chunks: number; indexes: number; apply: number };
  cutover?: CutoverSpec;
  /** Online mode: how changes are captured (preflight resolves auto; see MigrationPlan.capture). */
  capture?: CaptureChoice;
  onFailure: 'rollback' | 'keep';
  deadlineMs?: number;
  callback?: { url: string; secret?: string; events: boolean };
  metadata?: Record<string, unknown>;
}

export { SpecError } from './errors';
export type { SpecProblem } from './errors';

function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return 'spec';
  return path
    .map((part, i) => (typeof part === 'number' ? `[${part}]` : `${i === 0 ? '' : '.'}${String(part)}`))
    .join('');
}

type Issue = z.core.$ZodIssue;

/** zod's own words where they would puzzle a person writing YAML ("expected int, received number"). */
const plainMessage: z.core.$ZodErrorMap = (issue) => {
  if (issue.code !== 'invalid_type') return undefined;
  if (issue.input === undefined) return 'is required';
  if (issue.expected === 'int') return 'must be a whole number';
  return undefined;
};

/**
 * A union's failure reports every branch; keep the branch that matched the value's type (an
 * object entry's errors, not "expected string").
 */
function flatten(issues: readonly Issue[], prefix: PropertyKey[] = []): { path: PropertyKey[]; issue: Issue }[] {
  return issues.flatMap((issue) => {
    const path = [...prefix, ...issue.path];
    if (issue.code === 'invalid_union' && issue.errors.length > 0) {
      const branches = issue.errors.filter((branch) => !branch.every((i) => (i.code === 'invalid_type' || i.code === 'invalid_value') && i.path.length === 0));
      if (branches.length > 0) return flatten(branches[0], path);
    }
    return [{ path, issue }];
  });
}

function problemsOf(error: z.ZodError): SpecProblem[] {
  return flatten(error.issues).map(({ path, issue }) => {
    let message = issue.message;
    if (issue.code === 'unrecognized_keys') {
      message = `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}; see schema/ferry-spec.schema.json for the fields a spec may have`;
    }
    const missing = issue.code === 'invalid_union' && issue.errors.some((branch) => branch.some((i) => i.code === 'invalid_type' && i.message === 'is required'));
    if (missing) message = 'is required';
    else if (issue.code === 'invalid_union') {
      message =
        path.length === 1
          ? 'must be all, or a list of "schema.table", patterns such as "public.*" and { name: "schema.table", target?, chunks? }'
          : 'must be "schema.table", a pattern such as "public.*", or { name: "schema.table", target?, chunks? }';
    }
    if (issue.code === 'invalid_type' && path.length === 0) {
      message = `${issue.message}; a spec is a mapping with source, target and tables (see schema/ferry-spec.schema.json)`;
    }
    return { path: formatPath(path), message };
  });
}

/** Validates an already-decoded spec object and returns its normalised form, or throws SpecError. */
export function parseSpec(input: unknown): Spec {
  const { specSchema, entryNames } = schemas();
  const result = specSchema.safeParse(input, { error: plainMessage });
  if (!result.success) throw new SpecError(problemsOf(result.error));
  const s = result.data;
  return {
    id: s.id,
    source: s.source,
    target: s.target,
    mode: s.mode,
    ...tablesOf(s.tables, s.exclude, entryNames),
    ...(s.objects === 'all' ? { objects: 'all' as const } : {}),
    truncate: s.truncate,
    batchRows: s.batchRows,
    validation: s.validation,
    parallelism: s.parallelism ?? { tables: PARALLELISM.tables, chunks: PARALLELISM.chunks, indexes: PARALLELISM.indexes, apply: PARALLELISM.apply },
    cutover:
      s.mode === 'online'
        ? {
            approval: s.cutover?.approval ?? 'auto',
            approvalTimeoutMs: parseDuration(s.cutover?.approvalTimeout ?? '24h')!,
            afterwards: s.cutover?.afterwards ?? 'keep-frozen',
            maxWaitMs: parseDuration(s.cutover?.maxWait ?? '5m')!,
            onBlocked: s.cutover?.onBlocked ?? 'rollback',
            ...(s.cutover?.approvalSecret ? { approvalSecret: s.cutover.approvalSecret } : {}),
            ...switchOf(s.cutover?.switch),
          }
        : undefined,
    ...(s.mode === 'online' ? { capture: s.capture ?? 'auto' } : {}),
    onFailure: s.onFailure,
    deadlineMs: s.deadline === undefined ? undefined : parseDuration(s.deadline),
    callback: s.callback,
    metadata: s.metadata,
  };
}

type ParsedSwitch = NonNullable<z.output<typeof import('./spec-schema').specSchema>['cutover']>['switch'];

/** cutover.switch, normalised: the one switcher given, its timeout in milliseconds. */
function switchOf(parsed: ParsedSwitch): { switch?: SwitchSpec } {
  if (parsed?.pgbouncer) return { switch: { pgbouncer: parsed.pgbouncer } };
  if (parsed?.webhook) return { switch: { webhook: { url: parsed.webhook.url, secret: parsed.webhook.secret, timeoutMs: parseDuration(parsed.webhook.timeout)! } } };
  return {};
}

type ParsedTables = z.output<typeof import('./spec-schema').specSchema>['tables'];

/** The spec's tables: those it names, in its order, and its patterns, if it has any. */
function tablesOf(
  parsed: ParsedTables,
  exclude: string[] | undefined,
  entryNames: typeof import('./spec-schema').entryNames,
): { tables: TableSpec[]; selection?: TableSelection } {
  const entries = parsed === 'all' ? ['all'] : parsed;
  const patterned = entries.some((e) => typeof e === 'string' && isPattern(e));
  const tables: TableSpec[] = [];
  const include: TableSelection['include'] = [];
  entries.forEach((entry, index) => {
    const field = parsed === 'all' ? 'tables' : `tables[${index}]`;
    if (typeof entry === 'string' && isPattern(entry)) {
      include.push({ field, pattern: parseTablePattern(entry) as TablePattern });
      return;
    }
    const names = entryNames(entry)!;
    tables.push({ ...names, ...(typeof entry !== 'string' && entry.chunks !== undefined ? { chunks: entry.chunks } : {}), ...(patterned ? { field } : {}) });
  });
  if (!patterned) return { tables };
  return { tables, selection: { include, exclude: (exclude ?? []).map((text) => parseTablePattern(text) as TablePattern) } };
}

/** The JSON Schema published for non-TypeScript callers (schema/ferry-spec.schema.json). */
export function specJsonSchema(): Record<string, unknown> {
  return {
    ...schemas().specJsonSchemaBody(),
    $id: 'https://github.com/ferry/ferry/schema/ferry-spec.schema.json',
    title: 'Ferry migration spec',
  };
}

/**
 * Checks a `throttle` signal's values (they arrive from any Temporal client, not only Ferry's):
 * the accepted request, or the reason it is refused. A bad value must never reach a running copy.
 */
/**
 * A throttle signal's request, from any client: refused (with the reason) unless it holds only
 * rowsPerSecond and batchRows, each in range — batchRows in the product's: a migration's copy
 * batches by default, a change plan passes its backfill's (never clamped in silence).
 */
export function checkThrottle(
  request: unknown,
  batchRowsRange: { min: number; max: number } = BATCH_ROWS,
): { ok: true; value: { rowsPerSecond?: number; batchRows?: number } } | { ok: false; reason: string } {
  if (request === null || typeof request !== 'object' || Array.isArray(request)) return { ok: false, reason: 'throttle takes {rowsPerSecond?, batchRows?}' };
  const { rowsPerSecond, batchRows, ...rest } = request as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length) return { ok: false, reason: `throttle: unknown field ${unknown[0]}; use rowsPerSecond or batchRows` };
  const value: { rowsPerSecond?: number; batchRows?: number } = {};
  if (rowsPerSecond !== undefined) {
    if (typeof rowsPerSecond !== 'number' || !Number.isInteger(rowsPerSecond) || rowsPerSecond < 0 || rowsPerSecond > 100_000_000) {
      return { ok: false, reason: 'throttle.rowsPerSecond must be a whole number from 0 (no cap) to 100000000' };
    }
    value.rowsPerSecond = rowsPerSecond;
  }
  if (batchRows !== undefined) {
    if (typeof batchRows !== 'number' || !Number.isInteger(batchRows) || batchRows < batchRowsRange.min || batchRows > batchRowsRange.max) {
      return { ok: false, reason: `throttle.batchRows must be a whole number from ${batchRowsRange.min} to ${batchRowsRange.max}` };
    }
    value.batchRows = batchRows;
  }
  return { ok: true, value };
}

/**
 * The rate after a checked throttle, the same for migrations and change plans: it changes only
 * what it names (rowsPerSecond 0 lifts the cap; a request of batchRows alone keeps the cap).
 */
export function throttled<R extends { rowsPerSecond?: number; batchRows?: number }>(current: R, t: { rowsPerSecond?: number; batchRows?: number }): R {
  return {
    ...current,
    rowsPerSecond: t.rowsPerSecond === undefined ? current.rowsPerSecond : t.rowsPerSecond || undefined,
    batchRows: t.batchRows ?? current.batchRows,
  };
}
