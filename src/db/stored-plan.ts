/**
 * A plan of more than PLAN_PAGE tables travels by reference (MigrationPlan.stored): the
 * migration's preflight stores it whole in the target's `_ferry.migrations` row, the workflow
 * loads its tables a page at a time, and the activities that take every table read them here.
 * A bookkeeping row is data anyone with write access to the target could have changed: what is
 * read back is checked against the plan's shape.
 */
import { ClientBase } from 'pg';
import { checkPlan, checkTables, MigrationPlan, PLAN_PAGE, TablePlan } from '../core/plan';
import { FAILURE } from '../core/failure-types';
import { bookkeepingExists, ensureBookkeeping, lockBookkeeping } from './bookkeeping';
import { inTransaction } from './connections';
import { refusal } from './errors';

/** Whether a plan is too large to travel whole (more than PLAN_PAGE tables). */
export function outgrowsPayload(plan: MigrationPlan): boolean {
  return plan.tables.length > PLAN_PAGE;
}

/** The plan without its tables, as the workflow carries a stored one. */
export function storedHeader(plan: MigrationPlan, tables: number): MigrationPlan {
  return { ...plan, tables: [], stored: { tables } };
}

/**
 * Stores the whole plan as the migration's bookkeeping row, in one target transaction (the
 * bookkeeping made first if it is not there). A row already there is a retry's: it is replaced
 * until a table was prepared from it (its checkpoints exist), then kept.
 */
export async function storePlan(db: ClientBase, migrationId: string, plan: MigrationPlan): Promise<void> {
  await inTransaction(db, async () => {
    await lockBookkeeping(db);
    await ensureBookkeeping(db);
    await db.query(
      `INSERT INTO _ferry.migrations (id, plan) VALUES ($1, $2)
       ON CONFLICT (id) DO UPDATE SET plan = EXCLUDED.plan
       WHERE NOT EXISTS (SELECT 1 FROM _ferry.checkpoints c WHERE c.migration_id = EXCLUDED.id)`,
      [migrationId, JSON.stringify(plan)],
    );
  });
}

/** The stored plan's tables [from, to) in plan order, checked; refused when the migration has no row (rolled back). */
export async function storedTables(db: ClientBase, migrationId: string, from = 0, to = Number.MAX_SAFE_INTEGER): Promise<TablePlan[]> {
  const gone = () => refusal(FAILURE.PlanNotStored, `migration ${migrationId} has no plan stored on the target any more (rolled back or cleaned up); nothing to read`);
  if (!(await bookkeepingExists(db))) throw gone();
  const { rows } = await db.query(
    `SELECT EXISTS (SELECT 1 FROM _ferry.migrations WHERE id = $1 AND plan IS NOT NULL) AS present,
            (SELECT coalesce(jsonb_agg(t.value ORDER BY t.ordinality), '[]')
               FROM _ferry.migrations m, jsonb_array_elements(m.plan -> 'tables') WITH ORDINALITY t
              WHERE m.id = $1 AND t.ordinality > $2 AND t.ordinality <= $3) AS tables`,
    [migrationId, from, to],
  );
  if (!rows[0].present) throw gone();
  const checked = checkTables(rows[0].tables);
  if (!checked.ok) throw refusal(FAILURE.InvalidPlan, `the plan stored for migration ${migrationId} on the target is not one preflight makes (${checked.reason})`);
  return checked.tables;
}

/** An activity's tables: its input's, or — given `storedFor`, a migration's id — its stored plan's. */
export async function tablesOrStored<T>(db: ClientBase, input: { tables: T[]; storedFor?: string }): Promise<T[] | TablePlan[]> {
  return input.storedFor ? await storedTables(db, input.storedFor) : input.tables;
}

/** How many tables an activity that goes over every table reads (with their catalog entries) at once. */
export const TABLES_PAGE = 500;

/**
 * An activity's tables (as tablesOrStored) a page at a time, so that one going over 10,000 tables
 * never holds every plan and every catalog entry at once: read whole, those took the worker's
 * heap from about 40 MB to 100 MB at the end of such a migration.
 */
export async function* tablePages<T>(db: ClientBase, input: { tables: T[]; storedFor?: string }, size = TABLES_PAGE): AsyncGenerator<T[] | TablePlan[]> {
  if (!input.storedFor) {
    for (let from = 0; from < input.tables.length; from += size) yield input.tables.slice(from, from + size);
    return;
  }
  for (let from = 0; ; from += size) {
    const page = await storedTables(db, input.storedFor, from, from + size);
    if (page.length > 0) yield page;
    if (page.length < size) return;
  }
}

/**
 * The plan stored for the migration (checked), or null when it has no row. One of more than
 * PLAN_PAGE tables comes without them (storedHeader).
 */
export async function readStoredPlan(db: ClientBase, migrationId: string): Promise<MigrationPlan | null | 'without plan'> {
  const { rows } = await db.query(
    `SELECT plan IS NULL AS none, plan - 'tables' || jsonb_build_object('tables', CASE WHEN jsonb_array_length(plan -> 'tables') > $2 THEN '[]'::jsonb ELSE plan -> 'tables' END) AS plan,
            jsonb_array_length(plan -> 'tables') AS tables
       FROM _ferry.migrations WHERE id = $1`,
    [migrationId, PLAN_PAGE],
  );
  if (rows.length === 0) return null;
  if (rows[0].none) return 'without plan';
  const stored = rows[0].tables > PLAN_PAGE ? { stored: { tables: rows[0].tables as number } } : {};
  const checked = checkPlan({ ...rows[0].plan, ...stored });
  if (!checked.ok) throw refusal(FAILURE.InvalidPlan, `the plan stored for migration ${migrationId} on the target is not one preflight makes (${checked.reason}); it cannot be resumed`);
  return checked.plan;
}
