/** The soak tier (`npm run test:soak`): cases at the scale a claim was reproduced at, minutes each. */
const base = require('./jest.config');

module.exports = {
  ...base,
  testMatch: ['<rootDir>/test/soak/**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/'],
  testTimeout: 1_800_000,
  // Each soak case loads the machine on its own (millions of rows, hundreds of tables): two at once.
  maxWorkers: 2,
};
