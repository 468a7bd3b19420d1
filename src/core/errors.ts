/**
 * Ferry's error classes, in one place. Pure module (workflows use SpecError). Failures that
 * cross Temporal carry a type instead (src/core/failure-types.ts).
 */
import type { AnyFailureType } from './failure-types';

export interface SpecProblem {
  path: string;
  message: string;
}

/** A spec (or change plan) that cannot be accepted; each problem names its field. Exit code 2. */
export class SpecError extends Error {
  constructor(readonly problems: SpecProblem[]) {
    super(problems.map((p) => `${p.path}: ${p.message}`).join('\n'));
    this.name = 'SpecError';
  }
}

/** A refusal from preflight or the client: nothing was started. Exit code 2. */
export class RefusedError extends Error {
  constructor(
    message: string,
    readonly type: AnyFailureType,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'RefusedError';
  }
}

/** Settings from the environment that cannot work (a half TLS pair, a bad number). Exit code 2. */
export class ConfigError extends Error {}

/** No PostgreSQL answers where one was expected; the message says how to point Ferry at one. */
export class PostgresUnreachableError extends Error {}

/** A state machine asked for a move its transition table does not allow. */
export class IllegalTransitionError extends Error {
  constructor(
    readonly machine: string,
    readonly from: string,
    readonly to: string,
  ) {
    super(`illegal ${machine} transition ${from} → ${to}`);
    this.name = 'IllegalTransitionError';
  }
}
