/**
 * preflightWorkflow: a short helper that runs preflight on the workers (which hold the
 * connections) before `ferry start` starts the migration, so a refusal starts nothing.
 */
import { ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import { MigrationPlan } from '../src/core/plan';
import { SpecError } from '../src/core/spec';
import { parseWorkflowSpec } from './spec-input';
import { FAILURE } from '../src/core/failure-types';

const { preflight } = proxyActivities<Activities>({
  startToCloseTimeout: '5 minutes',
  // preflight heartbeats every 2 s: a lost worker costs seconds, not the whole 5 minutes.
  heartbeatTimeout: '20 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '5 seconds', maximumAttempts: 3 },
});

export async function preflightWorkflow(specInput: unknown, migrationId: string): Promise<MigrationPlan> {
  let spec;
  try {
    spec = parseWorkflowSpec(specInput);
  } catch (err) {
    throw ApplicationFailure.nonRetryable(err instanceof SpecError ? err.message : String(err), FAILURE.InvalidSpec);
  }
  return preflight({ migrationId, spec });
}
