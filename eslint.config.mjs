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
        { name: '../../activities', message: 'import activities as types only', allowTypeImports: true },
        { name: '../../../activities', message: 'import activities as types only', allowTypeImports: true },
      ],
      patterns: [
        { group: ['node:*'], message: 'workflow code must be deterministic: no Node modules' },
        { group: ['../activities/*', '../../activities/*', '../../../activities/*'], message: 'import activities as types only', allowTypeImports: true },
        // Workflows may import src/core (pure) only; everything else in src performs I/O.
        { group: ['../src/**', '!../src/core', '!../src/core/**', '../../src/**', '!../../src/core', '!../../src/core/**', '../../../src/**', '!../../../src/core', '!../../../src/core/**'], message: 'workflows may import only src/core (pure modules); the rest of src performs I/O', allowTypeImports: true },
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
    // src/core: the pure modules workflows import — nothing outside src/core but libraries that do no I/O.
    files: ['src/core/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': deterministic['@typescript-eslint/no-restricted-imports'].map((entry) =>
        typeof entry === 'object'
          ? { ...entry, patterns: [...entry.patterns, { group: ['../*', '!../core'], message: 'src/core must not import the rest of src (it performs I/O)', allowTypeImports: true }] }
          : entry,
      ),
    },
  },
);
