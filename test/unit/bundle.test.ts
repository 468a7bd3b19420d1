/**
 * The workflow bundle's cache key: one bundle per version of the workflow code and per checkout,
 * since webpack writes the checkout's absolute paths into the bundle (a workflow's stack traces
 * show them). And its text: ASCII only, so that V8 holds it at one byte a character.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Script, createContext } from 'node:vm';
import { asciiOnly, workflowBundlePath, workflowCodeHash } from '../../src/temporal/bundle';

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

describe('asciiOnly', () => {
  const run = (code: string) => new Script(code).runInContext(createContext({}));

  it('escapes what lies beyond ASCII, and the code means the same', () => {
    const code = [
      '// a comment — with an arrow →',
      'const text = "a — b";',
      "const quoted = 'c → d';",
      'const template = `e ${1 + 1} ↔ f`;',
      'const matched = /x—y/.test("x—y");',
      'const ünïcode = 1;',
      'JSON.stringify([text, quoted, template, matched, ünïcode]);',
    ].join('\n');
    const escaped = asciiOnly(code);
    expect(escaped).not.toMatch(/[\u0080-\uffff]/);
    expect(escaped).toContain('\\u2014');
    expect(run(escaped)).toBe(run(code));
    expect(JSON.parse(run(escaped))).toEqual(['a — b', 'c → d', 'e 2 ↔ f', true, 1]);
  });

  it('refuses a character right after a backslash, which the escape would change', () => {
    expect(() => asciiOnly('const s = "\\—";')).toThrow(/backslash before "—"/);
  });

  it('leaves the workflow bundle the workers run ASCII only', () => {
    // The bundle the test workers share (built by the jest set-up, as a worker builds it).
    const bundle = readFileSync(workflowBundlePath(), 'utf8');
    expect(bundle.length).toBeGreaterThan(100_000);
    expect(bundle).not.toMatch(/[\u0080-\uffff]/);
  });
});
