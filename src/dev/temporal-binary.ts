/**
 * Finds the `temporal` CLI (docs/getting-started.md: Two commands): PATH → Ferry's cache outside the checkout
 * (~/.cache/ferry/bin) → `go install …/cmd/temporal@v1.5.1` into that cache when Go is present.
 * Returns null when none of these works; the dev-server bootstrap then falls back to
 * @temporalio/testing's download, which needs the internet.
 */
import { spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { cacheDir } from '../cache-dir';

export { cacheDir } from '../cache-dir';

export const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal';
/** The newest CLI release that `go install` accepts (later ones carry a replace directive). */
export const TEMPORAL_CLI_VERSION = 'v1.5.1';

export function cachedBinaryPath(): string {
  return join(cacheDir(), 'bin', 'temporal');
}

export function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function findOnPath(name: string, path: string = process.env.PATH ?? ''): string | null {
  for (const dir of path.split(delimiter)) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return null;
}

/** PATH, then the cache; null when neither has the binary. */
export function locateTemporalBinary(): string | null {
  if (process.env.FERRY_TEMPORAL_BIN && isExecutable(process.env.FERRY_TEMPORAL_BIN)) return process.env.FERRY_TEMPORAL_BIN;
  return findOnPath('temporal') ?? (isExecutable(cachedBinaryPath()) ? cachedBinaryPath() : null);
}

function goBinary(): string | null {
  const fromPath = findOnPath('go');
  if (fromPath) return fromPath;
  return isExecutable('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : null;
}

/**
 * Builds the CLI with Go into a temporary GOBIN and renames it into the cache, so concurrent
 * callers never see a half-written binary. The first build takes several minutes on 2 cores.
 */
export async function buildTemporalBinary(report: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): Promise<string | null> {
  const go = goBinary();
  if (!go) return null;
  const target = cachedBinaryPath();
  mkdirSync(join(cacheDir(), 'bin'), { recursive: true });
  const staging = mkdtempSync(join(cacheDir(), 'build-'));
  report(`ferry: building the temporal CLI ${TEMPORAL_CLI_VERSION} with Go into ${target} (first time only; several minutes on 2 cores)`);
  const started = Date.now();
  const ticker = setInterval(() => report(`ferry: still building temporal… ${Math.round((Date.now() - started) / 1000)}s`), 30_000);
  try {
    const code = await new Promise<number>((resolve, reject) => {
      const child = spawn(go, ['install', `${TEMPORAL_CLI_MODULE}@${TEMPORAL_CLI_VERSION}`], {
        env: { ...process.env, GOBIN: staging, GOFLAGS: '-trimpath' },
        stdio: ['ignore', 'inherit', 'inherit'],
      });
      child.on('error', reject);
      child.on('exit', (c) => resolve(c ?? 1));
    });
    if (code !== 0 || !existsSync(join(staging, 'temporal'))) {
      throw new Error(`go install ${TEMPORAL_CLI_MODULE}@${TEMPORAL_CLI_VERSION} failed with exit code ${code}`);
    }
    renameSync(join(staging, 'temporal'), target);
    report(`ferry: temporal CLI built in ${Math.round((Date.now() - started) / 1000)}s`);
    return target;
  } finally {
    clearInterval(ticker);
    rmSync(staging, { recursive: true, force: true });
  }
}

/** The binary's path, building it when Go is available; null when it cannot be had locally. */
export async function ensureTemporalBinary(report?: (line: string) => void): Promise<string | null> {
  return locateTemporalBinary() ?? (await buildTemporalBinary(report));
}

export function temporalVersion(binary: string): string {
  return spawnSync(binary, ['--version'], { encoding: 'utf8' }).stdout.trim();
}
