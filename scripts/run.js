#!/usr/bin/env node
/*
 * Bootstrap behind `npm test`, `npm run demo` and friends: installs node_modules when they are
 * missing or older than package-lock.json (npm ci), compiles dist/ when it is not current (what
 * bin/ferry.js runs: the CLI and worker processes that tests and benchmarks spawn), then runs a
 * TypeScript entry through tsx. Plain Node on purpose: it has to work before any dependency is
 * installed.
 */
const { spawnSync } = require('node:child_process');
const { createHash } = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const lockHash = createHash('sha256').update(fs.readFileSync(path.join(root, 'package-lock.json'))).digest('hex');
const stamp = path.join(root, 'node_modules', '.ferry-install-stamp');
const installed = fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8') === lockHash;
if (!installed) {
  process.stderr.write('ferry: installing node modules (npm ci)…\n');
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const result = spawnSync(npm, ['ci', '--no-audit', '--no-fund'], { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) process.exit(result.status ?? 1);
  fs.writeFileSync(stamp, lockHash);
}
// npm ci's `prepare` has compiled already when it just ran; otherwise this is a no-op unless the
// sources changed. A failed build (a type error) stops here, as the type check would later.
const built = require('./build').build();
if (built !== 0) process.exit(built);

const entry = path.resolve(root, process.argv[2]);
process.argv.splice(1, 2, entry);
require('tsx/cjs');
require(entry);
