import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The repository's root. */
export const ROOT = join(__dirname, '..', '..');

/** Every .ts file under `dir` (relative to the root), as root-relative paths; folders named in `skip` left out. */
export function sourceFiles(dir: string, skip: string[] = []): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (skip.includes(name)) return [];
    if (statSync(join(ROOT, path)).isDirectory()) return sourceFiles(path, skip);
    return name.endsWith('.ts') ? [path] : [];
  });
}
