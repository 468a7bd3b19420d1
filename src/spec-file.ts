/** Reads a spec from a .json, .yaml or .yml file (or "-" for stdin) and validates it. */
import { readFileSync } from 'node:fs';
import YAML from 'yaml';
import { parseSpec, Spec, SpecError } from './spec';

export interface LoadedSpec {
  raw: unknown;
  spec: Spec;
}

export function decodeSpecText(text: string, name: string): unknown {
  if (name.endsWith('.json')) {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new SpecError([{ path: 'spec', message: `${name} is not valid JSON: ${(err as Error).message}` }]);
    }
  }
  const doc = YAML.parseDocument(text, { uniqueKeys: true, prettyErrors: true });
  if (doc.errors.length > 0) {
    throw new SpecError(doc.errors.map((e) => ({ path: 'spec', message: `${name}: ${e.message}` })));
  }
  return doc.toJS({ maxAliasCount: 50 });
}

export function loadSpecFile(path: string): LoadedSpec {
  let text: string;
  try {
    text = readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (err) {
    throw new SpecError([{ path: 'spec', message: `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` }]);
  }
  const raw = decodeSpecText(text, path);
  return { raw, spec: parseSpec(raw) };
}
