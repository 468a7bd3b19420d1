/**
 * preflightWorkflow: a short helper that runs preflight on the workers (which hold the
 * connections) before `ferry start` starts the migration, so a refusal starts nothing. A refusal
 * is its result (PreflightRefusal), not a failure: the helper completes, and the client exits 2
 * with the refusal's message. Executions begun before patch `preflight-refusal-as-result` failed
 * with it instead, and replay so.
 */
import { ApplicationFailure, setCurrentDetails } from '@temporalio/workflow';
import { helperActivities } from '../activity-options';
import { MigrationPlan } from '../../src/core/plan';
import { SpecError } from '../../src/core/spec';
import { parseWorkflowSpec } from './spec-input';
import { checkSwitch } from './switch';
import { FAILURE } from '../../src/core/failure-types';
import { forWebUi } from '../../src/core/details';
import { PreflightRefusal, preflightRefusal } from '../../src/core/failures';
import { flags } from '../patches';

const { preflight } = helperActivities.preflight;

/**
 * How a caller wants a refusal: as the result ({refused}) only when it says it understands one.
 * A caller that does not (an older FerryClient, another SDK) gets the failing helper it knew,
 * so it never takes a refusal for a plan.
 */
export interface PreflightOptions {
  refusalAsResult?: boolean;
}

export async function preflightWorkflow(specInput: unknown, migrationId: string, options: PreflightOptions = {}): Promise<MigrationPlan | PreflightRefusal> {
  return refusalsAsResult(options, async () => {
    const spec = parsedOrRefused(parseWorkflowSpec, specInput);
    const plan = await preflight({ migrationId, spec });
    // Only specs with a PgBouncer switch (none before it existed) ask its worker.
    await checkSwitch(spec, undefined);
    return plan;
  });
}

/** The spec (or plan) parsed; one that does not parse is refused as InvalidSpec, for good. */
export function parsedOrRefused<T>(parse: (input: unknown) => T, input: unknown): T {
  try {
    return parse(input);
  } catch (err) {
    throw ApplicationFailure.nonRetryable(err instanceof SpecError ? err.message : String(err), FAILURE.InvalidSpec);
  }
}

/**
 * Runs a preflight helper's body; a refusal (a non-retryable failure of the spec check or of the
 * preflight activity) becomes the result when the caller asked for that. Other failures (a
 * worker lost past its retries, a database unreachable past its retries) still fail the
 * helper: something broke.
 */
export async function refusalsAsResult<T>(options: PreflightOptions, body: () => Promise<T>): Promise<T | PreflightRefusal> {
  // The marker is recorded whatever the caller asked, so every new execution replays alike.
  const asResult = flags.preflightRefusalAsResult && options.refusalAsResult === true;
  try {
    return await body();
  } catch (err) {
    const refusal = asResult ? preflightRefusal(err, FAILURE.Refused) : undefined;
    if (!refusal) throw err;
    setCurrentDetails(forWebUi(`**Refused by preflight** (nothing was started or changed): \`${refusal.refused.type}\` ${refusal.refused.message}`));
    return refusal;
  }
}
