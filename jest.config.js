/** Jest runs TypeScript through SWC; suites talk to a real Temporal dev server and PostgreSQL. */
module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': ['@swc/jest'] },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  // The compiled build (scripts/build.js) is for the processes tests spawn, never for jest itself.
  modulePathIgnorePatterns: ['<rootDir>/dist/'],
  globalSetup: '<rootDir>/test/helpers/global-setup.ts',
  testTimeout: 120_000,
  maxWorkers: 2,
  forceExit: false,
};
