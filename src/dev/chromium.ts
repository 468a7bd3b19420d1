/**
 * Finds the Chromium that the Web UI test drives through playwright-core (docs/reliability.md):
 * FERRY_CHROMIUM_BIN → PATH (`chromium`, `chromium-browser`) → /usr/bin/chromium. When none is
 * there and this process is root on a machine with apt-get, it installs Debian's `chromium`
 * package (running `apt-get update` and the install again only when the install failed because
 * the package lists lack it).
 * Otherwise it fails with a message naming the package. Nothing is downloaded from elsewhere.
 */
import { spawnSync } from 'node:child_process';
import { findOnPath, isExecutable } from './temporal-binary';

/** The Debian package that provides /usr/bin/chromium. */
export const CHROMIUM_PACKAGE = 'chromium';
const NAMES = ['chromium', 'chromium-browser'];
const DEBIAN_PATH = '/usr/bin/chromium';

/** The executable's path, or null when this machine has none. */
export function locateChromium(env: NodeJS.ProcessEnv = process.env): string | null {
  if (env.FERRY_CHROMIUM_BIN && isExecutable(env.FERRY_CHROMIUM_BIN)) return env.FERRY_CHROMIUM_BIN;
  for (const name of NAMES) {
    const found = findOnPath(name, env.PATH ?? '');
    if (found) return found;
  }
  return isExecutable(DEBIAN_PATH) ? DEBIAN_PATH : null;
}

export interface InstallRun {
  status: number | null;
  output: string;
}

/** Runs one apt-get command as it would run here; replaceable in unit tests. */
export type AptRunner = (args: string[]) => InstallRun;

const runApt: AptRunner = (args) => {
  const run = spawnSync('apt-get', args, {
    encoding: 'utf8',
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 64 * 1024 * 1024,
  });
  return { status: run.error ? null : run.status, output: `${run.stdout ?? ''}${run.stderr ?? ''}${run.error ? run.error.message : ''}` };
};

/** apt-get's words for "the package lists do not know this package" or "they point at files gone". */
export function listsMissing(output: string): boolean {
  return /Unable to locate package|has no installation candidate|is not available, but is referred to|404\s+Not Found|Failed to fetch/i.test(output);
}

function notFound(reason: string): Error {
  return new Error(
    `Chromium is needed for the Web UI test and was not found (PATH, ${DEBIAN_PATH}, FERRY_CHROMIUM_BIN). ${reason} ` +
      `Install Debian's \`${CHROMIUM_PACKAGE}\` package (apt-get install ${CHROMIUM_PACKAGE}), or set FERRY_CHROMIUM_BIN to a Chromium executable.`,
  );
}

export interface EnsureChromiumOptions {
  report?: (line: string) => void;
  env?: NodeJS.ProcessEnv;
  /** For tests: whether this process may install packages (root with apt-get). */
  canInstall?: boolean;
  apt?: AptRunner;
  /** For tests: where to look after installing. */
  locate?: () => string | null;
}

/**
 * The path of a Chromium executable, installing Debian's package when this process may. Throws
 * when there is none and it cannot be installed here.
 */
export function ensureChromium(options: EnsureChromiumOptions = {}): string {
  return ensureDebianPackage({ pkg: CHROMIUM_PACKAGE, purpose: 'the Web UI test', notFound, locate: () => locateChromium(options.env), ...options });
}

/** An executable: the variable's path when it is one, else on PATH, else where Debian's package puts it. */
export function locateExecutable(env: NodeJS.ProcessEnv, variable: string, name: string, debianPath: string): string | null {
  const given = env[variable];
  if (given && isExecutable(given)) return given;
  return findOnPath(name, env.PATH ?? '') ?? (isExecutable(debianPath) ? debianPath : null);
}

export interface DebianPackage extends Omit<EnsureChromiumOptions, 'env'> {
  pkg: string;
  /** What needs it, for the report line. */
  purpose: string;
  locate: () => string | null;
  notFound: (reason: string) => Error;
}

/**
 * The path of the executable `locate` finds, installing Debian's package `pkg` when it finds none
 * and this process may (root with apt-get): apt-get update and the install again only when the
 * install failed because the package lists lack it.
 */
export function ensureDebianPackage(options: DebianPackage): string {
  const { pkg, locate, notFound: missing } = options;
  const report = options.report ?? ((line: string) => process.stderr.write(`${line}\n`));
  const found = locate();
  if (found) return found;
  const canInstall = options.canInstall ?? (process.getuid?.() === 0 && findOnPath('apt-get') !== null);
  if (!canInstall) throw missing('It can be installed automatically only by root on a machine with apt-get.');
  const apt = options.apt ?? runApt;
  // Waits for another apt-get (a second test run installing at the same time) instead of failing.
  const install = ['-o', 'DPkg::Lock::Timeout=600', 'install', '-y', '--no-install-recommends', pkg];
  report(`ferry: installing Debian's ${pkg} package (apt-get install -y ${pkg}) for ${options.purpose}`);
  let run = apt(install);
  if (run.status !== 0 && listsMissing(run.output)) {
    report('ferry: the package lists lack it; running apt-get update first');
    const update = apt(['-o', 'DPkg::Lock::Timeout=600', 'update']);
    if (update.status !== 0) throw missing(`apt-get update failed (exit ${update.status}): ${tail(update.output)}`);
    run = apt(install);
  }
  if (run.status !== 0) throw missing(`apt-get install -y ${pkg} failed (exit ${run.status}): ${tail(run.output)}`);
  const installed = locate();
  if (!installed) throw missing(`apt-get install -y ${pkg} succeeded, yet no executable was found.`);
  report(`ferry: ${pkg} installed at ${installed}`);
  return installed;
}

function tail(output: string): string {
  return output.trim().split('\n').slice(-5).join(' / ');
}
