#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, so `npx ferry` works right after `npm ci` (no build step).
require('tsx/cjs');
require('../src/cli/main.ts')
  .main(process.argv)
  .then((code) => {
    process.exitCode = code;
  });
