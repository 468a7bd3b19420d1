/**
 * The migration spec (docs/architecture.md §9): a zod schema for the JSON/YAML a person or a service
 * writes, and its normalised form that workflows and activities use. Every refusal names the
 * field (`tables[1].chunks: …`). Pure module: the workflow validates its own input with it too,
 * because Go and Python callers start `migrationWorkflow` without Ferry's CLI.
 */
import { z } from 'zod';
import { SpecError, SpecProblem } from './errors';
import { parseDuration } from './duration';
import { displayQualified, parseQualifiedName, QualifiedName, sameName } from './identifiers';

export const BATCH_ROWS = { min: 100, max: 1_000_000, default: 50_000 };
export const CHUNKS = { min: 1, max: 256 };
// Two chunks at a time per table measured fastest with source and target sharing 2 cores
// (bench/copy.ts); raise parallelism.chunks when the databases have cores to spare.
export const PARALLELISM = { tables: 2, chunks: 2, indexes: 2, apply: 1, max: 64 };
/** Sessions applying one table's changes at once: each lane holds one on each side. */
export const MAX_APPLY_LANES = 16;
export const MAX_METADATA_BYTES = 16 * 1024;
export const MAX_TABLES = 500;
/**
 * Callback secrets are read only from worker variables with this prefix: a spec must not make
 * the workers sign a body it knows with FERRY_CONN_… or TEMPORAL_API_KEY (an HMAC oracle).
 */
export const CALLBACK_SECRET_NAME = /^FERRY_SECRET_[A-Z0-9_]{1,115}$/;

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

/** The result callback, shared by migration specs and change plans. */
export const callbackSchema = z
  .strictObject({
    url: z
      .string()
      .max(2048)
      .refine((u) => isHttpUrl(u), { error: 'must be an http:// or https:// URL (no spaces or control characters)' })
      .refine((u) => !hasCredentials(u), {
        error: 'must not carry a user or password (they would be stored in workflow history); sign requests with callback.secret instead',
      })
      .describe('http(s) URL that receives the result document (POST JSON)'),
    secret: z
      .string()
      .regex(CALLBACK_SECRET_NAME, {
        error:
          "must be the name of a workers' environment variable that starts with FERRY_SECRET_ (A-Z, 0-9, _; for example " +
          'FERRY_SECRET_HOOK), never the secret itself: workers sign only with FERRY_SECRET_* variables; rename the ' +
          'variable on the workers and here',
      })
      .optional()
      .describe('NAME of the workers\' variable FERRY_SECRET_<NAME> that holds the HMAC-SHA256 key (X-Ferry-Signature)'),
    events: z.boolean().default(false).describe('also POST every event, keyed <id>:<seq>'),
  })
  .optional()
  .describe('result callback, sent for every outcome');

const tableEntry = z.union([
  qualifiedName,
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
      .array(tableEntry)
      .min(1)
      .max(MAX_TABLES)
      .describe('"schema.table", or {name, target?, chunks?}'),
    truncate: z.boolean().default(false).describe('allow a non-empty existing target table to be replaced'),
    batchRows: int(BATCH_ROWS.min, BATCH_ROWS.max).default(BATCH_ROWS.default).describe('rows per copy batch (one target transaction)'),
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
        approval: z.enum(['auto', 'manual']).default('auto').describe('manual waits for `ferry approve ID` (signal approveCutover)'),
        approvalTimeout: duration(1000, 30 * 86_400_000).default('24h').describe('then the migration rolls back'),
        afterwards: z.enum(['keep-frozen', 'unfreeze']).default('keep-frozen').describe('whether the source stays write-frozen after cutover'),
        maxWait: duration(1000, 7 * 86_400_000)
          .default('5m')
          .describe('how long the cutover waits for write transactions that were open when writes were frozen'),
        onBlocked: z
          .enum(['rollback', 'terminate', 'wait'])
          .default('rollback')
          .describe('after maxWait: roll the migration back, end the blocking sessions (pg_terminate_backend), or keep waiting'),
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
    const seenSources = new Map<string, number>();
    const seenTargets = new Map<string, number>();
    spec.tables.forEach((entry, index) => {
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

export type SpecInput = z.input<typeof specSchema>;
type ParsedSpec = z.output<typeof specSchema>;

export interface TableSpec {
  source: QualifiedName;
  target: QualifiedName;
  chunks?: number;
}

export interface CutoverSpec {
  approval: 'auto' | 'manual';
  approvalTimeoutMs: number;
  afterwards: 'keep-frozen' | 'unfreeze';
  maxWaitMs: number;
  onBlocked: 'rollback' | 'terminate' | 'wait';
}

export type CaptureChoice = 'auto' | 'trigger' | 'logical';

/** The normalised spec: names parsed, durations in milliseconds, defaults applied. */
export interface Spec {
  id?: string;
  source: string;
  target: string;
  mode: 'full' | 'online';
  tables: TableSpec[];
  truncate: boolean;
  batchRows: number;
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

function entryNames(entry: ParsedSpec['tables'][number]): { source: QualifiedName; target: QualifiedName } | undefined {
  const sourceText = typeof entry === 'string' ? entry : entry.name;
  const targetText = typeof entry === 'string' ? entry : (entry.target ?? entry.name);
  const source = parseQualifiedName(sourceText);
  const target = parseQualifiedName(targetText);
  if (typeof source === 'string' || typeof target === 'string') return undefined;
  return { source, target };
}

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
      const branches = issue.errors.filter((branch) => !branch.every((i) => i.code === 'invalid_type' && i.path.length === 0));
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
    if (issue.code === 'invalid_union') message = 'must be "schema.table" or { name: "schema.table", target?, chunks? }';
    if (issue.code === 'invalid_type' && path.length === 0) {
      message = `${issue.message}; a spec is a mapping with source, target and tables (see schema/ferry-spec.schema.json)`;
    }
    return { path: formatPath(path), message };
  });
}

/** Validates an already-decoded spec object and returns its normalised form, or throws SpecError. */
export function parseSpec(input: unknown): Spec {
  const result = specSchema.safeParse(input, { error: plainMessage });
  if (!result.success) throw new SpecError(problemsOf(result.error));
  const s = result.data;
  return {
    id: s.id,
    source: s.source,
    target: s.target,
    mode: s.mode,
    tables: s.tables.map((entry) => {
      const names = entryNames(entry)!;
      return typeof entry === 'string' || entry.chunks === undefined ? names : { ...names, chunks: entry.chunks };
    }),
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
          }
        : undefined,
    ...(s.mode === 'online' ? { capture: s.capture ?? 'auto' } : {}),
    onFailure: s.onFailure,
    deadlineMs: s.deadline === undefined ? undefined : parseDuration(s.deadline),
    callback: s.callback,
    metadata: s.metadata,
  };
}

/** The JSON Schema published for non-TypeScript callers (schema/ferry-spec.schema.json). */
export function specJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(specSchema, { io: 'input', unrepresentable: 'any' }),
    $id: 'https://github.com/ferry/ferry/schema/ferry-spec.schema.json',
    title: 'Ferry migration spec',
  };
}

/**
 * Checks a `throttle` signal's values (they arrive from any Temporal client, not only Ferry's):
 * the accepted request, or the reason it is refused. A bad value must never reach a running copy.
 */
export function checkThrottle(request: unknown): { ok: true; value: { rowsPerSecond?: number; batchRows?: number } } | { ok: false; reason: string } {
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
    if (typeof batchRows !== 'number' || !Number.isInteger(batchRows) || batchRows < BATCH_ROWS.min || batchRows > BATCH_ROWS.max) {
      return { ok: false, reason: `throttle.batchRows must be a whole number from ${BATCH_ROWS.min} to ${BATCH_ROWS.max}` };
    }
    value.batchRows = batchRows;
  }
  return { ok: true, value };
}
