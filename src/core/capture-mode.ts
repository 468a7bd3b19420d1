/**
 * Which capture an online migration uses (docs/architecture.md §6): the spec's choice against
 * what the source allows. Pure module: the problems come from src/db/logical-check.ts.
 */
import type { CaptureChoice } from './spec';
import type { CapturePlan } from './plan';

export type CaptureResolution = { ok: true; plan: CapturePlan } | { ok: false; reason: string };

/**
 * trigger: always. logical: only without problems, else refused (naming each problem's fix).
 * auto: logical without problems, else trigger, saying why.
 */
export function resolveCapture(choice: CaptureChoice, problems: string[]): CaptureResolution {
  if (choice === 'trigger') return { ok: true, plan: { mode: 'trigger', reason: 'capture: trigger in the spec' } };
  if (problems.length === 0) {
    return {
      ok: true,
      plan: { mode: 'logical', reason: choice === 'logical' ? 'capture: logical in the spec' : 'capture: auto, and the source allows logical decoding' },
    };
  }
  if (choice === 'logical') {
    return {
      ok: false,
      reason: `capture: logical is not possible on this source: ${problems.join('; ')}; or set capture: trigger (or auto, which falls back to triggers)`,
    };
  }
  return { ok: true, plan: { mode: 'trigger', reason: `capture: auto, and logical capture is not possible: ${problems.join('; ')}` } };
}
