/**
 * changePreflight: reads the plan against the database before anything changes, and refuses
 * what cannot work or would hold a large table under an exclusive lock — every problem at once,
 * each with the step's path, as one non-retryable ChangeRefused failure (`ferry start` exits 2).
 * Tables, columns and constraints an earlier step of the plan creates count as present.
 */
import { ChangePlan } from '../src/core/change-plan';
import { FAILURE } from '../src/core/failure-types';
import { refusal } from '../src/db/errors';
import { checkOf } from './change-checks/checks';
import { Declared, StepDecision } from './change-checks/common';
import { ActivityDeps } from './deps';

export type { StepDecision } from './change-checks/common';

export interface ChangePreflightInput {
  changeId: string;
  plan: ChangePlan;
}

export interface ChangePreflightResult {
  serverVersion: string;
  steps: StepDecision[];
}

export function createChangePreflight({ connections }: ActivityDeps) {
  return async function changePreflight({ changeId, plan }: ChangePreflightInput): Promise<ChangePreflightResult> {
    return connections.withClient(plan.database, async (db) => {
      const serverVersion = (await db.query('SHOW server_version')).rows[0].server_version as string;
      const problems: string[] = [];
      const declared: Declared = { tables: new Set(), columns: new Set(), constraints: new Set(), notNull: new Set() };
      const decisions: StepDecision[] = [];
      for (const step of plan.steps) {
        const path = `steps[${step.index}]`;
        const decision: StepDecision = { index: step.index };
        const found = await checkOf(step)(db, plan, step, decision, declared, changeId);
        problems.push(...found.map((p) => `${path}${p}`));
        decisions.push(decision);
      }
      if (problems.length) {
        throw refusal(FAILURE.ChangeRefused, `the change plan was refused; nothing was changed:\n${problems.map((p) => `  ${p}`).join('\n')}`);
      }
      return { serverVersion, steps: decisions };
    });
  };
}

