/** Jest runs TypeScript through SWC; suites talk to a real Temporal dev server and PostgreSQL. */
module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': ['@swc/jest'] },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  globalSetup: '<rootDir>/test/helpers/global-setup.ts',
  testTimeout: 120_000,
  maxWorkers: 2,
  forceExit: false,
};
