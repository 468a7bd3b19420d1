import { parseSpec, SpecError } from '../../src/core/spec';

/** A refused spec's problems as `path: message` lines; throws when the spec is accepted. */
export function specProblems(input: unknown): string[] {
  try {
    parseSpec(input);
  } catch (err) {
    if (err instanceof SpecError) return err.problems.map((p) => `${p.path}: ${p.message}`);
    throw err;
  }
  throw new Error('spec was accepted');
}
