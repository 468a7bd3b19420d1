/** A change plan's bounds and step kinds (a module without zod: workflows read them without loading the schema). */
export const CHANGE_LIMITS = {
  steps: 200,
  sqlChars: 65_536,
  expressionChars: 4_096,
  setColumns: 64,
  alterClauses: 64,
  indexColumns: 32,
  backfillBatchRows: { min: 100, max: 100_000, default: 5_000 },
};
export const STEP_KINDS = ['sql', 'backfill', 'index', 'validate', 'rewrite'] as const;
export type StepKind = (typeof STEP_KINDS)[number];
export const ON_FAILURE = ['rollback', 'pause', 'fail'] as const;
export type OnFailure = (typeof ON_FAILURE)[number];
