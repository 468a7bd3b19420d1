/**
 * PostgreSQL errors without the row values they can carry. `detail` (`Key (email)=(…) already
 * exists`, `Failing row contains (…)`), `where` (`COPY t, line 3, column v: "…"`) and some
 * messages (`invalid input syntax for type integer: "…"`) quote data, and a failure that leaves
 * the worker is stored in workflow histories (and logged). What leaves is the SQLSTATE, the names
 * PostgreSQL reported (schema, table, column, constraint, type) and the message with every
 * quoted value replaced by "…"; `detail` and `where` never do.
 */
import { ApplicationFailure } from '@temporalio/common';
import { postgresFailure } from '../core/failure-types';

/** The fields of pg's DatabaseError that are read here. */
export interface PostgresErrorLike {
  message: string;
  code: string;
  severity: string;
  schema?: string;
  table?: string;
  column?: string;
  constraint?: string;
  dataType?: string;
}

/** What of a PostgreSQL error crosses into Temporal. */
export interface PostgresErrorNames {
  sqlState: string;
  schema?: string;
  table?: string;
  column?: string;
  constraint?: string;
  dataType?: string;
}

/**
 * A PostgreSQL error as it may leave the worker: a plain Error (Temporal keeps a plain cause as
 * message and stack, so the ApplicationFailure that wraps it stays the innermost one a workflow
 * reads) with the SQLSTATE and the reported names as fields, for the worker's log.
 */
export class PostgresError extends Error implements PostgresErrorNames {
  readonly sqlState: string;
  readonly schema?: string;
  readonly table?: string;
  readonly column?: string;
  readonly constraint?: string;
  readonly dataType?: string;

  constructor(names: PostgresErrorNames, message: string) {
    super(message);
    this.name = 'PostgresError';
    this.sqlState = names.sqlState;
    Object.assign(this, names);
  }
}

/** Classes whose messages quote only object names, from Ferry's own SQL (which never inlines values). */
const NAME_ONLY_CLASSES = new Set(['42', '3D', '3F']);

export function isPostgresError(err: unknown): err is PostgresErrorLike {
  const e = err as Partial<PostgresErrorLike> | null;
  return typeof e?.severity === 'string' && typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) && typeof e.message === 'string';
}

/** Replaces everything from the first to the last `quote` left in `text` (one value, or several, or an unclosed one) with a single "…". */
function blankQuoted(text: string, quote: string): string {
  const first = text.indexOf(quote);
  if (first < 0) return text;
  const last = text.lastIndexOf(quote);
  return `${text.slice(0, first)}${quote}…${quote}${last > first ? text.slice(last + 1) : ''}`;
}

/**
 * The message with its values blanked. PostgreSQL does not escape a quote inside a quoted value,
 * so values are not parsed: the names it reported are set aside, and everything between the
 * first and the last remaining quote goes.
 */
export function redactedMessage(err: PostgresErrorLike): string {
  // RAISE in a user's trigger or function: free text, no fixed part to keep.
  if (err.code.startsWith('P0')) return 'raised by a trigger or function (its text may quote row values, so it is not passed on)';
  const names = [err.schema, err.table, err.column, err.constraint, err.dataType].filter((n): n is string => Boolean(n));
  const kept: string[] = [];
  let text = err.message.replace(/\)=\(.*\)/s, ')=(…)');
  if (!NAME_ONLY_CLASSES.has(err.code.slice(0, 2))) {
    for (const name of [...new Set(names)].sort((a, b) => b.length - a.length)) {
      // Set aside as a private-use placeholder, which no PostgreSQL message contains.
      text = text.split(`"${name}"`).join(`\uE000${kept.push(`"${name}"`) - 1}\uE000`);
    }
    text = blankQuoted(text, '"');
  }
  text = blankQuoted(text, "'").replace(/\b0x[0-9a-f]+/gi, '0x…');
  return text.replace(/\uE000(\d+)\uE000/g, (_, i: string) => kept[Number(i)]);
}

function namesOf(err: PostgresErrorLike): PostgresErrorNames {
  const names: PostgresErrorNames = { sqlState: err.code };
  for (const key of ['schema', 'table', 'column', 'constraint', 'dataType'] as const) if (err[key]) names[key] = err[key];
  return names;
}

/** The error without its values, to chain as a cause. */
export function redacted(err: PostgresErrorLike): PostgresError {
  return new PostgresError(namesOf(err), redactedMessage(err));
}

/** A retryable error as the activity throws it: PostgreSQL's (redacted) words, typed `PostgresError.<SQLSTATE>`, the names as details. */
export function redactedRetryable(err: PostgresErrorLike): ApplicationFailure {
  return ApplicationFailure.create({ message: redactedMessage(err), type: postgresFailure(err.code), nonRetryable: false, details: [namesOf(err)] });
}
