#!/usr/bin/env node
/*
 * The compiled build: `tsc -p tsconfig.build.json` turns src/, activities/ and workflows/ into
 * JavaScript under dist/, which bin/ferry.js runs. dist/.ferry-build records a hash of the
 * sources it was compiled from, so "current" means "compiled from exactly these files" whatever
 * their timestamps (git checkouts, Docker COPY). It also records each file's size and mtime: when
 * none has changed, the hash is not taken again (every CLI call asks; reading and hashing the
 * sources took 20–30 ms of each). Plain Node: bin/ferry.js and scripts/run.js use it before
 * anything is compiled.
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

/** Every file the build reads from the repository, relative to it. */
function sourceFiles(root) {
  return [...CONFIG_FILES, ...SOURCE_DIRS.flatMap((dir) => tsFiles(root, dir))];
}

/** Hash of every file the build reads from the repository (paths relative, so a copy hashes the same). */
function sourceHash(root = ROOT) {
  const hash = createHash('sha256');
  for (const file of sourceFiles(root)) {
    hash.update(`${file.split(path.sep).join('/')}\0`);
    hash.update(fs.existsSync(path.join(root, file)) ? fs.readFileSync(path.join(root, file)) : '');
    hash.update('\0');
  }
  return hash.digest('hex');
}

/** Each source's size and mtime, one line: what the stamp compares before hashing. */
function sourceStats(root) {
  return sourceFiles(root)
    .map((file) => {
      const stat = fs.statSync(path.join(root, file), { throwIfNoEntry: false });
      return `${file.split(path.sep).join('/')}:${stat ? `${stat.size}:${stat.mtimeMs}` : '-'}`;
    })
    .join('\n');
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
  // Same files, sizes and mtimes as when the stamp was written: the same sources (an edit
  // changes the mtime). Otherwise the hash decides (a checkout touches files it does not change).
  if (stamp.stats !== undefined && stamp.stats === sourceStats(root)) return { current: true, stamp };
  if (stamp.sources !== sourceHash(root)) return { current: false, reason: 'dist/ was compiled from other sources than these' };
  return { current: true, stamp, stale: true };
}

/**
 * Compiles into dist/ unless it is current. The stamp goes first and comes back last, with the
 * hash taken before compiling: while tsc writes, and after a failed or interrupted build, every
 * bin/ferry.js sees no current build and runs the sources through tsx instead of half a build.
 * Returns tsc's exit status (0 when there was nothing to do).
 */
function build({ root = ROOT, force = false, log = (line) => process.stderr.write(`${line}\n`) } = {}) {
  const state = force ? undefined : buildState(root);
  if (state?.current) {
    pruneOrphans(root);
    // Sources touched but not changed since (a checkout): record their stats again, so that CLI
    // calls compare stats rather than hash. Not from bin/ferry.js, whose tree may be read-only.
    // Stats before the hash, so that an edit between the two leaves the stamp not matching.
    if (state.stale) {
      const stats = sourceStats(root);
      try {
        if (sourceHash(root) === state.stamp.sources) writeStamp(root, state.stamp.sources, stats);
      } catch {
        // A tree that cannot be written keeps its stamp: CLI calls then hash, as before stats.
      }
    }
    return 0;
  }
  // Both taken before compiling, the stats first: a source edited meanwhile leaves the build
  // not current.
  const stats = sourceStats(root);
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
  writeStamp(root, hash, stats);
  log(`ferry: compiled in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return 0;
}

function writeStamp(root, sources, stats) {
  fs.writeFileSync(path.join(root, STAMP), `${JSON.stringify({ sources, stats })}\n`);
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
