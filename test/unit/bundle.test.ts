/**
 * The workflow bundle's cache key: one bundle per version of the workflow code and per checkout,
 * since webpack writes the checkout's absolute paths into the bundle (a workflow's stack traces
 * show them).
 */
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { workflowCodeHash } from '../../src/temporal/bundle';

describe('workflowCodeHash', () => {
  let base: string;
  const checkout = (name: string) => {
    const root = join(base, name);
    mkdirSync(join(root, 'workflows'), { recursive: true });
    mkdirSync(join(root, 'src', 'core'), { recursive: true });
    writeFileSync(join(root, 'workflows', 'index.ts'), 'export { migrationWorkflow } from "./migration";\n');
    writeFileSync(join(root, 'src', 'core', 'names.ts'), 'export const MIGRATION_WORKFLOW = "migrationWorkflow";\n');
    return root;
  };

  beforeEach(() => {
    base = mkdtempSync(join(tmpdir(), 'ferry-bundle-key-'));
  });
  afterEach(() => rmSync(base, { recursive: true, force: true }));

  it('differs between two checkouts of the same code', () => {
    const a = checkout('a');
    const b = join(base, 'b');
    cpSync(a, b, { recursive: true });
    expect(workflowCodeHash(a)).not.toBe(workflowCodeHash(b));
  });

  it('is stable for one checkout, however its path is written', () => {
    const a = checkout('a');
    expect(workflowCodeHash(a)).toBe(workflowCodeHash(a));
    expect(workflowCodeHash(`${a}/workflows/../`)).toBe(workflowCodeHash(a));
  });

  it('changes with the workflow code of the checkout', () => {
    const a = checkout('a');
    const before = workflowCodeHash(a);
    writeFileSync(join(a, 'src', 'core', 'names.ts'), 'export const MIGRATION_WORKFLOW = "renamed";\n');
    expect(workflowCodeHash(a)).not.toBe(before);
  });

  it('is this checkout\'s by default', () => {
    expect(workflowCodeHash()).toBe(workflowCodeHash(join(__dirname, '..', '..')));
  });
});
