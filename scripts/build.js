#!/usr/bin/env node
/*
 * The compiled build: `tsc -p tsconfig.build.json` turns src/, activities/ and workflows/ into
 * JavaScript under dist/, which bin/ferry.js runs. dist/.ferry-build records a hash of the
 * sources it was compiled from, so "current" means "compiled from exactly these files" whatever
 * their timestamps (git checkouts, Docker COPY). Plain Node: bin/ferry.js and scripts/run.js use
 * it before anything is compiled.
 *
 *   node scripts/build.js           compile unless dist/ is current (npm run build; npm ci's prepare)
 *   node scripts/build.js --force   compile anyway
 */
const { spawnSync } = require('node:child_process');
const { createHash } = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
const SOURCE_DIRS = ['src', 'activities', 'workflows'];
const CONFIG_FILES = ['tsconfig.json', 'tsconfig.build.json'];
const STAMP = path.join('dist', '.ferry-build');
/** What bin/ferry.js loads; a stamp without it is no build. */
const ENTRY = path.join('dist', 'src', 'cli', 'main.js');
/** tsconfig.build.json's tsBuildInfoFile: an edit recompiles in about half the time of a full build. */
const BUILD_INFO = path.join('dist', '.tsbuildinfo');

function tsFiles(root, dir) {
  const full = path.join(root, dir);
  if (!fs.existsSync(full)) return [];
  return fs
    .readdirSync(full, { withFileTypes: true })
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .flatMap((entry) => {
      const rel = path.join(dir, entry.name);
      if (entry.isDirectory()) return tsFiles(root, rel);
      return entry.name.endsWith('.ts') ? [rel] : [];
    });
}

/** Hash of every file the build reads from the repository (paths relative, so a copy hashes the same). */
function sourceHash(root = ROOT) {
  const hash = createHash('sha256');
  for (const file of [...CONFIG_FILES, ...SOURCE_DIRS.flatMap((dir) => tsFiles(root, dir))]) {
    hash.update(`${file.split(path.sep).join('/')}\0`);
    hash.update(fs.existsSync(path.join(root, file)) ? fs.readFileSync(path.join(root, file)) : '');
    hash.update('\0');
  }
  return hash.digest('hex');
}

/** Whether dist/ was compiled from the sources as they are now; `reason` says why not. */
function buildState(root = ROOT) {
  let stamp;
  try {
    stamp = JSON.parse(fs.readFileSync(path.join(root, STAMP), 'utf8'));
  } catch {
    if (!fs.existsSync(path.join(root, 'dist'))) return { current: false, reason: 'no compiled build in dist/' };
    return { current: false, reason: 'dist/ holds no finished build (the last one failed, or one is under way)' };
  }
  if (!fs.existsSync(path.join(root, ENTRY))) return { current: false, reason: 'dist/ holds no finished build' };
  if (stamp.sources !== sourceHash(root)) return { current: false, reason: 'dist/ was compiled from other sources than these' };
  return { current: true };
}

/**
 * Compiles into dist/ unless it is current. The stamp goes first and comes back last, with the
 * hash taken before compiling: while tsc writes, and after a failed or interrupted build, every
 * bin/ferry.js sees no current build and runs the sources through tsx instead of half a build.
 * Returns tsc's exit status (0 when there was nothing to do).
 */
function build({ root = ROOT, force = false, log = (line) => process.stderr.write(`${line}\n`) } = {}) {
  if (!force && buildState(root).current) {
    pruneOrphans(root);
    return 0;
  }
  const hash = sourceHash(root);
  fs.rmSync(path.join(root, STAMP), { force: true });
  // tsc's incremental state would not re-emit outputs deleted behind its back.
  if (!fs.existsSync(path.join(root, ENTRY))) fs.rmSync(path.join(root, BUILD_INFO), { force: true });
  log('ferry: compiling TypeScript into dist/ (tsc -p tsconfig.build.json)…');
  const started = Date.now();
  const tsc = require.resolve('typescript/bin/tsc', { paths: [root] });
  const result = spawnSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) {
    log(`ferry: the build failed (tsc exit ${result.status ?? result.signal}); bin/ferry.js runs the sources through tsx until it succeeds`);
    return result.status ?? 1;
  }
  pruneOrphans(root);
  fs.writeFileSync(path.join(root, STAMP), `${JSON.stringify({ sources: hash })}\n`);
  log(`ferry: compiled in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return 0;
}

/**
 * Removes what earlier builds compiled from sources that are gone: tsc never deletes an output,
 * and Node resolves `require('../client')` to a stale dist/src/client.js before the
 * dist/src/client/ folder that replaced it.
 */
function pruneOrphans(root) {
  const walk = (dir) => {
    if (!fs.existsSync(dir)) return;
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        walk(full);
        if (fs.readdirSync(full).length === 0) fs.rmdirSync(full);
        continue;
      }
      const m = /^(.*)\.(js|js\.map|d\.ts)$/.exec(entry.name);
      if (!m) continue;
      const source = path.join(root, path.relative(path.join(root, 'dist'), dir), `${m[1]}.ts`);
      if (!fs.existsSync(source)) fs.rmSync(full);
    }
  };
  for (const dir of SOURCE_DIRS) walk(path.join(root, 'dist', dir));
}

module.exports = { build, buildState, sourceHash };

if (require.main === module) {
  try {
    require.resolve('typescript/bin/tsc', { paths: [ROOT] });
  } catch {
    // `npm ci --omit=dev` (the Docker image's runtime stage) runs `prepare` too, without the
    // compiler: nothing to build with there, and the image brings dist/ from its build stage.
    const prepare = process.env.npm_lifecycle_event === 'prepare';
    process.stderr.write(`ferry: TypeScript is not installed${prepare ? ' (a production install): not compiling' : ': run npm ci'}\n`);
    process.exit(prepare ? 0 : 1);
  }
  process.exitCode = build({ force: process.argv.includes('--force') });
}
