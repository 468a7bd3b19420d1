/**
 * bin/ferry.js runs the compiled CLI when dist/ was compiled from the sources beside it, and the
 * TypeScript through tsx, saying so, when the build is stale or missing. Which files a run loads
 * is what Node itself reports (NODE_DEBUG=module). Each case runs in a scratch copy of the
 * checkout: the real dist/ stays as it is for the `ferry` processes other suites are running.
 */
import { execFile } from 'node:child_process';
import { appendFileSync, cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');
const { build, buildState } = require('../../scripts/build') as {
  build: (options: { root: string; log: (line: string) => void }) => number;
  buildState: (root: string) => { current: boolean; reason?: string; stale?: boolean };
};

interface Run {
  code: number | null;
  stdout: string;
  /** stderr without Node's module-loading lines */
  stderr: string;
  /** every file Node loaded as a module */
  loaded: string[];
}

function ferry(root: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(root, 'bin', 'ferry.js'), ...args],
      { env: { ...process.env, NODE_DEBUG: 'module' }, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const lines = stderr.split('\n');
        resolve({
          code: err ? ((err as { code?: number }).code ?? -1) : 0,
          stdout,
          stderr: lines.filter((line) => !line.startsWith('MODULE ')).join('\n'),
          loaded: lines.flatMap((line) => /^MODULE \d+: load "([^"]+)"/.exec(line)?.[1] ?? []),
        });
      },
    );
  });
}

describe('bin/ferry.js', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'ferry-build-'));
  const spec = join(scratch, 'move.yaml');

  beforeAll(() => {
    // The jest set-up has compiled ROOT/dist from the sources copied here.
    for (const entry of ['bin', 'scripts', 'src', 'activities', 'workflows', 'dist', 'package.json', 'tsconfig.json', 'tsconfig.build.json']) {
      cpSync(join(ROOT, entry), join(scratch, entry), { recursive: true });
    }
    symlinkSync(join(ROOT, 'node_modules'), join(scratch, 'node_modules'));
    writeFileSync(spec, 'source: old\ntarget: new\ntables: [public.orders]\n');
  });

  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  const compiledMain = () => join(scratch, 'dist', 'src', 'cli', 'main.js');
  const sourceMain = () => join(scratch, 'src', 'cli', 'main.ts');
  const fromSources = (run: Run) => run.loaded.filter((file) => file.startsWith(join(scratch, 'src')) || /[\\/]node_modules[\\/]tsx[\\/]/.test(file));

  it('runs the compiled CLI, and no TypeScript, when dist/ was compiled from these sources', async () => {
    const help = await ferry(scratch, ['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: ferry');
    expect(help.stderr).toBe('');
    expect(help.loaded).toContain(compiledMain());
    expect(fromSources(help)).toEqual([]);
    const validate = await ferry(scratch, ['validate', spec]);
    expect([validate.code, validate.stdout.trim()]).toEqual([0, 'spec ok: full migration old → new, 1 table(s)']);
    expect(fromSources(validate)).toEqual([]);
  });

  it('falls back to tsx with a one-line note when a source changed, and runs compiled again once rebuilt', async () => {
    appendFileSync(join(scratch, 'src', 'cli', 'output.ts'), '// edited after the build\n');
    const stale = await ferry(scratch, ['validate', spec]);
    expect(stale.stderr.trim()).toBe('ferry: dist/ was compiled from other sources than these: running the TypeScript through tsx (npm run build compiles it)');
    expect([stale.code, stale.stdout.trim()]).toEqual([0, 'spec ok: full migration old → new, 1 table(s)']);
    expect(stale.loaded).toContain(sourceMain());
    expect(stale.loaded).not.toContain(compiledMain());

    expect(build({ root: scratch, log: () => undefined })).toBe(0);
    const rebuilt = await ferry(scratch, ['validate', spec]);
    expect([rebuilt.code, rebuilt.stderr]).toEqual([0, '']);
    expect(rebuilt.loaded).toContain(compiledMain());
    expect(fromSources(rebuilt)).toEqual([]);
  }, 120_000);

  it('compares sizes and mtimes before hashing: a touched source is hashed and its stats recorded again, an edit of the same size is seen', async () => {
    const edited = join(scratch, 'src', 'cli', 'output.ts');
    /** Whether dist/ is current, and whether the sources had to be hashed to tell. */
    const state = () => {
      const { current, stale } = buildState(scratch);
      return { current, hashed: stale === true };
    };
    // Built by the case before: the stamp's stats are these files' own, so no hash is taken.
    expect(state()).toEqual({ current: true, hashed: false });

    // A checkout that rewrites a file with the same content: another mtime, the same sources.
    utimesSync(edited, new Date(), new Date(Date.now() + 60_000));
    expect(state()).toEqual({ current: true, hashed: true });
    expect(build({ root: scratch, log: () => undefined })).toBe(0);
    expect(state()).toEqual({ current: true, hashed: false });

    // One character changed: the same size, a new mtime.
    writeFileSync(edited, readFileSync(edited, 'utf8').replace('// edited after the build', '// edited after the BUILD'));
    expect(buildState(scratch)).toEqual({ current: false, reason: 'dist/ was compiled from other sources than these' });
    const stale = await ferry(scratch, ['--help']);
    expect(stale.stderr).toContain('ferry: dist/ was compiled from other sources than these');
    expect(build({ root: scratch, log: () => undefined })).toBe(0);
    expect(state()).toEqual({ current: true, hashed: false });
  }, 120_000);

  it('falls back to tsx with a one-line note when there is no build (a fresh checkout)', async () => {
    rmSync(join(scratch, 'dist'), { recursive: true });
    const missing = await ferry(scratch, ['--help']);
    expect(missing.stderr.trim()).toBe('ferry: no compiled build in dist/: running the TypeScript through tsx (npm run build compiles it)');
    expect([missing.code, missing.stdout]).toEqual([0, expect.stringContaining('Usage: ferry')]);
    expect(missing.loaded).toContain(sourceMain());
  });
});
