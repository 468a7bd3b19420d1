/**
 * changePreflightWorkflow: runs a change plan's preflight on the workers (which hold the
 * connections) before `ferry start` starts the plan, so a refusal changes nothing. A refusal is
 * its result, as for preflightWorkflow (patch `preflight-refusal-as-result`).
 */
import { ApplicationFailure } from '@temporalio/workflow';
import type { ChangePreflightResult } from '../activities/change-preflight';
import { parseChangePlan } from '../src/core/change-plan';
import { FAILURE } from '../src/core/failure-types';
import type { PreflightRefusal } from '../src/core/failures';
import { SpecError } from '../src/core/spec';
import { PreflightOptions, refusalsAsResult } from './preflight';
import { checks } from './proxies';

export async function changePreflightWorkflow(planInput: unknown, changeId: string, options: PreflightOptions = {}): Promise<ChangePreflightResult | PreflightRefusal> {
  return refusalsAsResult(options, async () => {
    let plan;
    try {
      plan = parseChangePlan(planInput);
    } catch (err) {
      throw ApplicationFailure.nonRetryable(err instanceof SpecError ? err.message : String(err), FAILURE.InvalidSpec);
    }
    return checks.changePreflight({ changeId, plan });
  });
}
