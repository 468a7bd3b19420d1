#!/usr/bin/env node
/*
 * Runs the compiled CLI (dist/, see scripts/build.js). When dist/ is missing or was compiled from
 * other sources — TypeScript edited since, a checkout without its build — it runs the sources
 * through tsx instead, as before there was a build, and says so in one line on stderr. Not
 * compiling here: tsc takes 6–12 s on this project's 2-core machine (tsx costs about 0.5 s more a
 * call than the build), several processes start at once (a test's worker pool) and would compile
 * over each other, and the image's root filesystem is read-only. npm ci, npm test, npm run demo
 * and the jest set-up compile when the sources changed; `npm run build` does it by hand.
 */
const verb = process.argv[2];
if (verb === 'worker') {
  // A smaller young generation keeps a copying worker's peak RSS about 20 MB lower at no
  // measurable cost in throughput (bench/copy.ts); it applies to the isolates created from here on.
  // The workflow thread's heap otherwise grows towards V8's limit (about 4 GB here) before it
  // collects what finished workflows left: a heap that grows by 30% over what survived the last
  // full collection, and V8's memory-saving mode, took the peak over 500 tiny tables from 383 MB
  // to 298 MB in bench:copy with no slower runs. A soft bound, unlike a heap limit, which ran a
  // worker holding hundreds of online table workflows out of memory.
  const v8 = require('node:v8');
  for (const flag of ['--max-semi-space-size=2', '--heap-growing-percent=30', '--optimize-for-size']) v8.setFlagsFromString(flag);
}
const build = require('../scripts/build').buildState();
let cli;
if (build.current) {
  // Workers' stack traces (their logs, failures recorded in Temporal) point into the TypeScript,
  // as under tsx. Not for the short commands: reading the source maps of every module loaded
  // adds about 70 ms to each call.
  if (verb === 'worker' || verb === 'demo') process.setSourceMapsEnabled(true);
  cli = require('../dist/src/cli/main');
} else {
  process.stderr.write(`ferry: ${build.reason}: running the TypeScript through tsx (npm run build compiles it)\n`);
  require('tsx/cjs');
  cli = require('../src/cli/main.ts');
}
cli.main(process.argv).then((code) => {
  process.exitCode = code;
});
