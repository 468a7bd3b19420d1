/**
 * changePreflightWorkflow: runs a change plan's preflight on the workers (which hold the
 * connections) before `ferry start` starts the plan, so a refusal changes nothing. A refusal is
 * its result, as for preflightWorkflow (patch `preflight-refusal-as-result`).
 */
import type { ChangePreflightResult } from '../../activities/change-preflight';
import { parseChangePlan } from '../../src/core/change-plan';
import type { PreflightRefusal } from '../../src/core/failures';
import { parsedOrRefused, PreflightOptions, refusalsAsResult } from '../migration/preflight';
import { checks } from '../activity-options';

export async function changePreflightWorkflow(planInput: unknown, changeId: string, options: PreflightOptions = {}): Promise<ChangePreflightResult | PreflightRefusal> {
  return refusalsAsResult(options, async () => checks.changePreflight({ changeId, plan: parsedOrRefused(parseChangePlan, planInput) }));
}
