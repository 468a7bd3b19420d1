/**
 * ensureChromium: what it does when Chromium is there, when it must be installed (apt-get, with
 * `update` only after an install that failed for the lists), and when it cannot be. apt-get is
 * replaced by a recorder here; the Web UI test runs the real one.
 */
import { CHROMIUM_PACKAGE, ensureChromium, InstallRun, listsMissing, locateChromium } from '../../src/dev/chromium';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function fakeApt(answers: InstallRun[]) {
  const calls: string[][] = [];
  return {
    calls,
    apt: (args: string[]) => {
      calls.push(args);
      return answers.shift() ?? { status: 1, output: 'unexpected call' };
    },
  };
}

const quiet = () => undefined;

describe('ensureChromium', () => {
  it('returns a Chromium already there without running apt-get', () => {
    const { calls, apt } = fakeApt([]);
    expect(ensureChromium({ locate: () => '/usr/bin/chromium', apt, canInstall: true, report: quiet })).toBe('/usr/bin/chromium');
    expect(calls).toEqual([]);
  });

  it('installs the chromium package when missing, without apt-get update when the install works', () => {
    const { calls, apt } = fakeApt([{ status: 0, output: 'Setting up chromium' }]);
    let installed = false;
    const path = ensureChromium({
      locate: () => (installed ? '/usr/bin/chromium' : null),
      apt: (args) => {
        installed = true;
        return apt(args);
      },
      canInstall: true,
      report: quiet,
    });
    expect(path).toBe('/usr/bin/chromium');
    expect(calls).toHaveLength(1);
    expect(calls[0]).toEqual(expect.arrayContaining(['install', '-y', CHROMIUM_PACKAGE]));
    expect(calls[0]).not.toContain('update');
  });

  it('runs apt-get update once when the install fails for missing lists, then installs again', () => {
    const { calls, apt } = fakeApt([
      { status: 100, output: 'E: Unable to locate package chromium' },
      { status: 0, output: 'Reading package lists...' },
      { status: 0, output: 'Setting up chromium' },
    ]);
    const path = ensureChromium({ locate: () => (calls.length === 3 ? '/usr/bin/chromium' : null), apt, canInstall: true, report: quiet });
    expect(path).toBe('/usr/bin/chromium');
    expect(calls.map((c) => c.filter((a) => a === 'install' || a === 'update'))).toEqual([['install'], ['update'], ['install']]);
  });

  it('does not run apt-get update when the install failed for another reason, and names the package', () => {
    const { calls, apt } = fakeApt([{ status: 100, output: 'E: Sub-process /usr/bin/dpkg returned an error code (1)' }]);
    expect(() => ensureChromium({ locate: () => null, apt, canInstall: true, report: quiet })).toThrow(/apt-get install chromium.*FERRY_CHROMIUM_BIN|chromium.*failed \(exit 100\)/s);
    expect(calls).toHaveLength(1);
  });

  it('fails with a message naming the package when it may not install (not root, or no apt-get)', () => {
    const { calls, apt } = fakeApt([]);
    expect(() => ensureChromium({ locate: () => null, apt, canInstall: false, report: quiet })).toThrow(
      /Install Debian's `chromium` package \(apt-get install chromium\)/,
    );
    expect(calls).toEqual([]);
  });

  it('recognises apt-get\'s words for lists that lack the package', () => {
    expect(listsMissing('E: Unable to locate package chromium')).toBe(true);
    expect(listsMissing("E: Package 'chromium' has no installation candidate")).toBe(true);
    expect(listsMissing('Err:1 http://deb.debian.org/debian bookworm/main amd64 chromium 404  Not Found')).toBe(true);
    expect(listsMissing('E: Could not get lock /var/lib/dpkg/lock-frontend')).toBe(false);
  });

  it('takes FERRY_CHROMIUM_BIN first when it names an executable', () => {
    expect(locateChromium({ FERRY_CHROMIUM_BIN: process.execPath, PATH: '' })).toBe(process.execPath);
    expect(locateChromium({ FERRY_CHROMIUM_BIN: '/nonexistent/chromium', PATH: '' })).not.toBe('/nonexistent/chromium');
  });

  it('looks on the PATH it is given before /usr/bin/chromium', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-chromium-path-'));
    try {
      writeFileSync(join(dir, 'chromium-browser'), '#!/bin/sh\n', { mode: 0o755 });
      expect(locateChromium({ PATH: dir })).toBe(join(dir, 'chromium-browser'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
