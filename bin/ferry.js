#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, so `npx ferry` works right after `npm ci` (no build step).
if (process.argv[2] === 'worker') {
  // A smaller young generation keeps a copying worker's peak RSS about 20 MB lower at no
  // measurable cost in throughput (bench/copy.ts); it applies to the isolates created from here on.
  require('node:v8').setFlagsFromString('--max-semi-space-size=2');
}
require('tsx/cjs');
require('../src/cli/main.ts')
  .main(process.argv)
  .then((code) => {
    process.exitCode = code;
  });
