/**
 * The workflow bundle, built once per version of the workflow code and cached outside the
 * checkout (~/.cache/ferry/bundles). Webpack runs in a short-lived child process, so a worker
 * never carries the bundler's memory (about 150 MB) for the rest of its life.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { cacheDir } from './binary';

const ROOT = join(__dirname, '..', '..');
export const WORKFLOWS_PATH = require.resolve('../../workflows');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return sourceFiles(path);
      return name.endsWith('.ts') ? [path] : [];
    });
}

/** Identifies the workflow code: every TypeScript file it could import, plus the SDK version. */
export function workflowCodeHash(): string {
  const hash = createHash('sha256');
  hash.update(JSON.parse(readFileSync(require.resolve('@temporalio/workflow/package.json'), 'utf8')).version);
  for (const file of [...sourceFiles(join(ROOT, 'workflows')), ...sourceFiles(join(ROOT, 'src'))]) {
    hash.update(file.slice(ROOT.length)).update(readFileSync(file));
  }
  return hash.digest('hex').slice(0, 16);
}

/** Builds the bundle into `out` (atomically): run in a child process by workflowBundle(). */
export async function buildBundleFile(out: string): Promise<void> {
  const { bundleWorkflowCode, DefaultLogger } = await import('@temporalio/worker');
  const { writeFileSync } = await import('node:fs');
  const { code } = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: new DefaultLogger('WARN') });
  const tmp = `${out}.${process.pid}.tmp`;
  writeFileSync(tmp, code);
  renameSync(tmp, out);
}

/** The path of the current bundle, building it first when the cache lacks it. */
export function workflowBundlePath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.FERRY_WORKFLOW_BUNDLE) return env.FERRY_WORKFLOW_BUNDLE;
  const dir = join(cacheDir(), 'bundles');
  const file = join(dir, `workflows-${workflowCodeHash()}.js`);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    const run = spawnSync(process.execPath, ['--require', require.resolve('tsx/cjs'), __filename, file], { stdio: ['ignore', 'inherit', 'inherit'] });
    if (run.status !== 0 || !existsSync(file)) throw new Error(`bundling the workflows failed (exit ${run.status})`);
  }
  return file;
}

export function workflowBundle(env: NodeJS.ProcessEnv = process.env): { code: string } {
  return { code: readFileSync(workflowBundlePath(env), 'utf8') };
}

if (require.main === module) {
  buildBundleFile(process.argv[2]).catch((err) => {
    process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  });
}
