/**
 * Jest runs TypeScript through SWC; suites talk to a real Temporal dev server and PostgreSQL.
 * `npm test` runs this fast tier; the long soak cases under test/soak run with
 * `npm run test:soak` (jest.soak.config.js), and CI runs both.
 */
module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': ['@swc/jest'] },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/soak/'],
  // The compiled build (scripts/build.js) is for the processes tests spawn, never for jest itself.
  modulePathIgnorePatterns: ['<rootDir>/dist/'],
  globalSetup: '<rootDir>/test/helpers/global-setup.ts',
  globalTeardown: '<rootDir>/test/helpers/global-teardown.ts',
  testTimeout: 120_000,
  // Three suites at once on two cores: most of a suite's time is spent waiting (on Temporal's
  // timers, a heartbeat timeout, a throttled copy), and with two the cores sat idle a quarter of
  // the run (vmstat, 2026-12-05: 1,131 s of jest with two, 896 s with three, every case passing).
  maxWorkers: 3,
  forceExit: false,
};
