/** The signals and queries, where the workflows have always found them: they live with the contracts in src/core/signals.ts, which clients share. */
export * from '../src/core/signals';
