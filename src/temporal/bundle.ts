/**
 * The workflow bundle, built once per version of the workflow code and checkout, and cached
 * outside the checkout (~/.cache/ferry/bundles). Webpack runs in a short-lived child process, so a worker
 * never carries the bundler's memory (about 150 MB) for the rest of its life. Workers with
 * FERRY_CODEC_KEY use a second variant whose failure converter moves failure messages and stack
 * traces into (encrypted) payloads: the sandbox converts a workflow's failures itself.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { cacheDir } from '../cache-dir';

/** Whether this module runs compiled (dist/src/temporal/bundle.js) or as TypeScript (tsx, jest). */
const COMPILED = __filename.endsWith('.js');
/** The repository (or image) root, either way. */
const ROOT = join(__dirname, ...(COMPILED ? ['..', '..', '..'] : ['..', '..']));
/**
 * Webpack bundles the TypeScript sources even when this process runs compiled: the bundle is
 * the same file whichever way a worker runs (the one the tests and the Docker image prebuild),
 * its cache key below hashes these very files, and the bundler compiles TypeScript itself.
 */
export const WORKFLOWS_PATH = join(ROOT, 'workflows', 'index.ts');
export const FAILURE_CONVERTER_PATH = join(ROOT, 'src', 'failure-converter.ts');

export interface BundleOptions {
  /** Failure messages and stack traces as payloads (src/failure-converter.ts). */
  encodeFailures?: boolean;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return sourceFiles(path);
      return name.endsWith('.ts') ? [path] : [];
    });
}

/**
 * Identifies the workflow code of one checkout: every TypeScript file it could import, the SDK
 * version, and the checkout's own path. Webpack writes the absolute paths of the files it bundles
 * into the bundle (they are what a workflow's stack trace shows), so two checkouts of the same
 * code must not share one: each would show the other's paths.
 */
export function workflowCodeHash(checkout: string = ROOT): string {
  const root = resolve(checkout);
  const hash = createHash('sha256');
  hash.update(JSON.parse(readFileSync(require.resolve('@temporalio/workflow/package.json'), 'utf8')).version);
  hash.update(`\0root:${root}\0`);
  for (const file of [...sourceFiles(join(root, 'workflows')), ...sourceFiles(join(root, 'src'))]) {
    hash.update(file.slice(root.length)).update(readFileSync(file));
  }
  return hash.digest('hex').slice(0, 16);
}

/** Builds the bundle into `out` (atomically): run in a child process by workflowBundle(). */
export async function buildBundleFile(out: string, options: BundleOptions = {}): Promise<void> {
  const { bundleWorkflowCode, DefaultLogger } = await import('@temporalio/worker');
  const { writeFileSync } = await import('node:fs');
  const { code } = await bundleWorkflowCode({
    workflowsPath: WORKFLOWS_PATH,
    failureConverterPath: options.encodeFailures ? FAILURE_CONVERTER_PATH : undefined,
    logger: new DefaultLogger('WARN'),
  });
  const tmp = `${out}.${process.pid}.tmp`;
  writeFileSync(tmp, asciiOnly(code));
  renameSync(tmp, out);
}

/**
 * The bundle with every character beyond ASCII written as a \u escape. A worker holds the bundle
 * as a JavaScript string in each of its threads, and V8 stores a string with even one character
 * beyond Latin-1 (a dash or an arrow in a comment or a message) at two bytes a character: the
 * 3.7 MB bundle (about two thirds of it its inline source map) took 7.4 MB a copy. The escape
 * means the same character wherever JavaScript lets one stand (comments, identifiers, string,
 * template and regular-expression literals); only a tagged template's raw text would differ, and
 * the workflows use none. A source-map column after such a character on the same line is off by
 * five for each (a workflow's stack trace stays exact to the line).
 */
export function asciiOnly(code: string): string {
  return code.replace(/[\u0080-\uffff]/g, (c, at: number) => {
    // After a backslash the escape would read as an escaped backslash and plain text.
    if (code[at - 1] === '\\') throw new Error(`the workflow bundle has a backslash before ${JSON.stringify(c)}: cannot escape it`);
    return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  });
}

/**
 * The path of the current bundle, building it first when the cache lacks it. FERRY_WORKFLOW_BUNDLE
 * names a prebuilt plain bundle (the tests build one for all their workers).
 */
export function workflowBundlePath(env: NodeJS.ProcessEnv = process.env, options: BundleOptions = {}): string {
  if (env.FERRY_WORKFLOW_BUNDLE && !options.encodeFailures) return env.FERRY_WORKFLOW_BUNDLE;
  const dir = join(cacheDir(), 'bundles');
  const file = join(dir, `workflows-${workflowCodeHash()}${options.encodeFailures ? '-encoded-failures' : ''}.js`);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    const args = [__filename, file, ...(options.encodeFailures ? ['--encode-failures'] : [])];
    const loader = COMPILED ? [] : ['--require', require.resolve('tsx/cjs')];
    const run = spawnSync(process.execPath, [...loader, ...args], { stdio: ['ignore', 'inherit', 'inherit'] });
    if (run.status !== 0 || !existsSync(file)) throw new Error(`bundling the workflows failed (exit ${run.status})`);
  }
  return file;
}

/**
 * The bundle as the SDK's worker options take it: by path, so that a worker holds one copy of its
 * code (the SDK reads the file itself) rather than ours beside the SDK's.
 */
export function workflowBundle(env: NodeJS.ProcessEnv = process.env, options: BundleOptions = {}): { codePath: string } {
  return { codePath: workflowBundlePath(env, options) };
}

/** `--prebuild`: both variants into the cache, paths printed (the Docker image's build step). */
async function prebuild(): Promise<void> {
  for (const encodeFailures of [false, true]) process.stdout.write(`${workflowBundlePath({}, { encodeFailures })}\n`);
}

if (require.main === module) {
  const run = process.argv[2] === '--prebuild' ? prebuild() : buildBundleFile(process.argv[2], { encodeFailures: process.argv.includes('--encode-failures') });
  run.catch((err) => {
    process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  });
}
