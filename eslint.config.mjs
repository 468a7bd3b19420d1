// Lint: typescript-eslint's recommended rules, plus the rule that keeps workflow code
// deterministic: nothing under workflows/ (or the pure src modules it imports) may import Node
// modules, database drivers or the activity/worker/client SDKs; activities only as types.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const nodeBuiltins = [
  'assert', 'buffer', 'child_process', 'cluster', 'crypto', 'dgram', 'dns', 'events', 'fs', 'fs/promises', 'http', 'http2',
  'https', 'net', 'os', 'path', 'perf_hooks', 'process', 'readline', 'stream', 'stream/promises', 'timers', 'tls', 'url',
  'util', 'v8', 'vm', 'worker_threads', 'zlib',
];

const deterministic = {
  '@typescript-eslint/no-restricted-imports': [
    'error',
    {
      paths: [
        ...nodeBuiltins.map((name) => ({ name, message: 'workflow code must be deterministic: no Node modules' })),
        ...['pg', 'pg-copy-streams', 'pino', 'yaml', 'commander', 'prom-client', '@temporalio/client', '@temporalio/worker', '@temporalio/activity', '@temporalio/testing'].map(
          (name) => ({ name, message: 'side effects belong in activities/, not in workflow code' }),
        ),
        { name: '../activities', message: 'import activities as types only', allowTypeImports: true },
      ],
      patterns: [
        { group: ['node:*'], message: 'workflow code must be deterministic: no Node modules' },
        { group: ['../activities/*'], message: 'import activities as types only', allowTypeImports: true },
        { group: ['../src/db/*', '../src/cli/*', '../src/temporal/*', '../src/client', '../src/worker', '../src/logger', '../src/postgres', '../src/spec-file', '../src/config'], message: 'these modules perform I/O; workflows may import only pure src modules', allowTypeImports: true },
      ],
    },
  ],
};

export default tseslint.config(
  { ignores: ['node_modules/**', 'coverage/**', '.scratch/**', 'dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', require: 'readonly', module: 'writable', __dirname: 'readonly', console: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      '@typescript-eslint/no-require-imports': 'off',
    },
  },
  { files: ['workflows/**/*.ts'], rules: deterministic },
  {
    // Pure modules that workflows import.
    files: ['src/names.ts', 'src/spec.ts', 'src/identifiers.ts', 'src/duration.ts', 'src/state-machine.ts', 'src/plan.ts', 'src/status.ts', 'src/chunks.ts', 'src/failures.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': deterministic['@typescript-eslint/no-restricted-imports'].map((entry) =>
        typeof entry === 'object'
          ? { ...entry, patterns: [...entry.patterns, { group: ['./db/*', './cli/*', './temporal/*', './client', './worker', './logger', './postgres', './spec-file', './config'], message: 'pure modules must not import I/O modules', allowTypeImports: true }] }
          : entry,
      ),
    },
  },
);
