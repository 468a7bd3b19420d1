#!/usr/bin/env node
/*
 * Bootstrap behind `npm test`, `npm run demo` and friends: installs node_modules when they are
 * missing or older than package-lock.json (npm ci), then runs a TypeScript entry through tsx.
 * Plain Node on purpose: it has to work before any dependency is installed.
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

const entry = path.resolve(root, process.argv[2]);
process.argv.splice(1, 2, entry);
require('tsx/cjs');
require(entry);
