/**
 * The spec as a workflow reads it. callback.secret must name a FERRY_SECRET_* variable now; before
 * that rule any variable name passed. A migration started then must replay as it ran — refusing
 * its spec on replay is a nondeterminism error that fails every workflow task of it, maybe in the
 * middle of a cutover — so an execution without the patch marker keeps the old rule. Its callback
 * is then refused by the workers (sendCallback checks the name again); the migration goes on.
 */
import { parseSpec, Spec, SpecError } from '../../src/core/spec';
import { flags } from '../patches';

/** The rule for callback.secret before FERRY_SECRET_* names. */
const EARLIER_SECRET_NAME = /^[A-Z_][A-Z0-9_]{0,127}$/;

/** The secret of a spec refused for its callback.secret alone, when the earlier rule accepted it. */
function earlierSecret(err: unknown, input: unknown): string | undefined {
  if (!(err instanceof SpecError) || !err.problems.every((p) => p.path === 'callback.secret')) return undefined;
  const secret = (input as { callback?: { secret?: unknown } } | null)?.callback?.secret;
  return typeof secret === 'string' && EARLIER_SECRET_NAME.test(secret) ? secret : undefined;
}

export function parseWorkflowSpec(input: unknown): Spec {
  try {
    return parseSpec(input);
  } catch (err) {
    const secret = earlierSecret(err, input);
    // patched() is asked only here, so the histories of valid specs carry no marker.
    if (secret === undefined || flags.ferrySecretNames) throw err;
    const { callback, ...rest } = input as { callback: Record<string, unknown> };
    const spec = parseSpec({ ...rest, callback: Object.fromEntries(Object.entries(callback).filter(([key]) => key !== 'secret')) });
    return { ...spec, callback: { ...spec.callback!, secret } };
  }
}
