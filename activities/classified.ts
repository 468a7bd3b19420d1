/**
 * Errors classified once, for every activity: a PostgreSQL error that no retry can fix becomes
 * a non-retryable `PostgresError.<SQLSTATE>` failure (its row values left out), anything else
 * goes to Temporal's retry policy as it is (src/db/errors.ts). The failure names the activity and
 * the table it worked on, so activities need no catch block of their own for this.
 */
import { asActivityFailure } from '../src/db/errors';
import { displayQualified, QualifiedName } from '../src/core/identifiers';

type Activity = (...args: never[]) => Promise<unknown>;

/** `copyChunk public.orders`, from the activity's name and the table its input names. */
export function activityContext(name: string, input: unknown): string {
  const table = (input as { table?: { source?: QualifiedName } | QualifiedName } | undefined)?.table;
  const relation = table && 'source' in table ? table.source : (table as QualifiedName | undefined);
  return relation?.schema && relation.name ? `${name} ${displayQualified(relation)}` : name;
}

export function classified<A extends Record<string, Activity>>(activities: A): A {
  const wrapped: Record<string, Activity> = {};
  for (const [name, fn] of Object.entries(activities)) {
    wrapped[name] = async (...args: never[]) => {
      try {
        return await fn(...args);
      } catch (err) {
        throw asActivityFailure(err, activityContext(name, args[0]));
      }
    };
  }
  return wrapped as A;
}
