/** Reads a spec from a .json, .yaml or .yml file (or "-" for stdin) and validates it. */
import { readFileSync, statSync } from 'node:fs';
import { ChangePlan, isChangePlanInput, parseChangePlan } from './core/change-plan';
import { parseSpec, Spec, SpecError } from './core/spec';

/** A real spec is a few KB (2,000 tables and 16 KB of metadata stay far below this). */
export const MAX_SPEC_FILE_BYTES = 1024 * 1024;

export interface LoadedSpec {
  raw: unknown;
  spec: Spec;
}

function tooLarge(name: string, bytes: number): SpecError {
  return new SpecError([{ path: 'spec', message: `${name} is ${bytes} bytes; a spec may have at most ${MAX_SPEC_FILE_BYTES} bytes` }]);
}

/**
 * Loaded for a YAML spec only: a JSON spec and every other CLI call are spared it (with
 * cli-progress, loaded as lazily in src/view/watch.ts, about 20 ms of a 0.5 s CLI call here).
 */
const yaml = (): typeof import('yaml') => require('yaml');

export function decodeSpecText(text: string, name: string): unknown {
  if (text.length > MAX_SPEC_FILE_BYTES) throw tooLarge(name, Buffer.byteLength(text));
  if (name.endsWith('.json')) {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new SpecError([{ path: 'spec', message: `${name} is not valid JSON: ${(err as Error).message}` }]);
    }
  }
  try {
    const doc = yaml().parseDocument(text, { uniqueKeys: true, prettyErrors: true });
    if (doc.errors.length > 0) {
      throw new SpecError(doc.errors.map((e) => ({ path: 'spec', message: `${name}: ${e.message}` })));
    }
    // Aliases expanding past this count are a "billion laughs" document; toJS throws.
    return doc.toJS({ maxAliasCount: 50 });
  } catch (err) {
    if (err instanceof SpecError) throw err;
    throw new SpecError([{ path: 'spec', message: `${name} is not a usable YAML document: ${(err as Error).message}` }]);
  }
}

function readSpecText(path: string): string {
  try {
    if (path !== '-') {
      const size = statSync(path).size;
      if (size > MAX_SPEC_FILE_BYTES) throw tooLarge(path, size);
    }
    return readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (err) {
    if (err instanceof SpecError) throw err;
    throw new SpecError([{ path: 'spec', message: `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }]);
  }
}

export function loadSpecFile(path: string): LoadedSpec {
  const raw = decodeSpecText(readSpecText(path), path);
  return { raw, spec: parseSpec(raw) };
}

export interface LoadedSpecOrPlan {
  raw: unknown;
  /** A migration spec … */
  spec?: Spec;
  /** … or a change plan (`kind: change`). */
  plan?: ChangePlan;
}

/** A spec file that may hold either a migration spec or a change plan (`kind: change`). */
export function loadSpecOrPlanFile(path: string): LoadedSpecOrPlan {
  const raw = decodeSpecText(readSpecText(path), path);
  return isChangePlanInput(raw) ? { raw, plan: parseChangePlan(raw) } : { raw, spec: parseSpec(raw) };
}
