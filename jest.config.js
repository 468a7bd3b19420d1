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
  testTimeout: 120_000,
  maxWorkers: 2,
  forceExit: false,
};
