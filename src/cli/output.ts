/** How the CLI prints errors and JSON, and which exit code each error means (documents: src/view/format.ts). */
import { ZodError } from 'zod';
import { ConfigError } from '../config';
import { RefusedError } from '../client';
import { PostgresUnreachableError, rootMessage } from '../core/failures';
import { SpecError } from '../core/spec';

/** An error that already says everything; exits with its code. */
export class CliExit extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

export function exitCodeFor(err: unknown): number {
  if (err instanceof CliExit) return err.code;
  if (err instanceof SpecError || err instanceof RefusedError || err instanceof ZodError || err instanceof ConfigError) return 2;
  return 1;
}

export function printError(err: unknown): void {
  if (err instanceof SpecError) {
    process.stderr.write(`ferry: the spec is invalid; nothing was started\n`);
    for (const p of err.problems) process.stderr.write(`  ${p.path}: ${p.message}\n`);
    return;
  }
  if (err instanceof RefusedError) {
    process.stderr.write(`ferry: refused (${err.type}); nothing was started\n  ${err.message}\n`);
    return;
  }
  if (err instanceof ConfigError) {
    process.stderr.write(`ferry: configuration: ${err.message}\n`);
    return;
  }
  if (err instanceof ZodError) {
    for (const issue of err.issues) process.stderr.write(`ferry: ${issue.path.join('.')}: ${issue.message}\n`);
    return;
  }
  if (err instanceof CliExit || err instanceof PostgresUnreachableError) {
    if (err.message) process.stderr.write(`ferry: ${err.message}\n`);
    return;
  }
  const message = (err as Error)?.message ?? String(err);
  const root = rootMessage(err);
  process.stderr.write(`ferry: ${message}${root !== message ? `\n  cause: ${root}` : ''}\n`);
  if (/ECONNREFUSED|Failed to connect|transport error|UNAVAILABLE/i.test(`${message} ${root}`)) {
    process.stderr.write(`  is Temporal running at ${process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233'}? Start one with \`ferry server\`.\n`);
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}
