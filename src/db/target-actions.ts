/**
 * What a table the user prepared on the target would do on Ferry's writes: its own triggers and
 * the foreign keys of and to it. Ferry's target sessions write as a replica
 * (session_replication_role = replica): an ordinary trigger and every foreign key's checks and
 * actions stay quiet then, a trigger set ENABLE ALWAYS or ENABLE REPLICA still fires — and
 * without the replica role everything fires, the online sync's delete-and-reinsert included.
 */
import { ApplicationFailure } from '@temporalio/common';
import { ClientBase } from 'pg';
import { displayQualified, QualifiedName, quoteQualified } from '../core/identifiers';
import { refusal } from './errors';
import { FAILURE } from '../core/failure-types';

/** Ferry's role on the target, and whether it may write as a replica there. */
export interface TargetRole {
  name: string;
  replica: boolean;
}

export interface TargetAction {
  kind: 'trigger' | 'foreign key';
  name: string;
  /** The table it is defined on (a foreign key: the referencing table). */
  on: string;
  /** A foreign key's referenced table. */
  references?: string;
  /** Whether it fires (or is checked) on Ferry's writes. */
  fires: boolean;
  /** Why it does or does not, for the plan's notes. */
  why: string;
}

/** User triggers on the table and its partitions; a partition's clone of a trigger counts once. */
const TRIGGERS_SQL = `
WITH tree AS (SELECT relid FROM pg_catalog.pg_partition_tree($1::regclass) UNION SELECT $1::regclass)
SELECT DISTINCT ON (t.tgname) t.tgname::text AS name, t.tgrelid::regclass::text AS relation, t.tgenabled::text AS enabled
  FROM pg_catalog.pg_trigger t JOIN tree ON t.tgrelid = tree.relid
 WHERE NOT t.tgisinternal
 ORDER BY t.tgname, t.tgrelid = $1::regclass DESC`;

/** Foreign keys of the table and to it (a partition's copy of one counts once). */
const FOREIGN_KEYS_SQL = `
SELECT c.conname::text AS name, c.conrelid::regclass::text AS relation, c.confrelid::regclass::text AS referenced
  FROM pg_catalog.pg_constraint c
 WHERE c.contype = 'f' AND c.conparentid = 0 AND (c.conrelid = $1::regclass OR c.confrelid = $1::regclass)
 ORDER BY c.conname, c.conrelid::regclass::text`;

/** `replica`: whether Ferry's role may set session_replication_role on the target. */
export async function readTargetActions(db: ClientBase, table: QualifiedName, replica: boolean): Promise<TargetAction[]> {
  const relation = quoteQualified(table);
  const actions: TargetAction[] = [];
  for (const t of (await db.query(TRIGGERS_SQL, [relation])).rows) {
    actions.push({ kind: 'trigger', name: t.name, on: t.relation, ...triggerFiring(t.enabled, replica) });
  }
  for (const fk of (await db.query(FOREIGN_KEYS_SQL, [relation])).rows) {
    actions.push({
      kind: 'foreign key',
      name: fk.name,
      on: fk.relation,
      references: fk.referenced,
      fires: !replica,
      why: replica
        ? "is neither checked nor acted on for Ferry's writes (they run as a replica)"
        : "is checked and its actions fire on Ferry's writes (Ferry cannot write as a replica)",
    });
  }
  return actions;
}

/** pg_trigger.tgenabled: O fires outside replication, R only as a replica, A always, D never. */
function triggerFiring(enabled: string, replica: boolean): { fires: boolean; why: string } {
  if (enabled === 'D') return { fires: false, why: 'is disabled' };
  if (replica && enabled === 'O') return { fires: false, why: "does not fire on Ferry's writes (they run as a replica)" };
  if (replica) return { fires: true, why: `fires on Ferry's writes even as a replica (ENABLE ${enabled === 'A' ? 'ALWAYS' : 'REPLICA'})` };
  if (enabled === 'R') return { fires: false, why: "does not fire on Ferry's writes (ENABLE REPLICA, and they cannot run as a replica)" };
  return { fires: true, why: "fires on Ferry's writes (Ferry cannot write as a replica)" };
}

/** One line of the plan: "trigger audit on public.parents does not fire on Ferry's writes (…)". */
export function describeAction(a: TargetAction): string {
  const what = a.kind === 'trigger' ? `trigger ${a.name} on ${a.on}` : `foreign key ${a.name} of ${a.on} (→ ${a.references})`;
  return `${what} ${a.why}`;
}

/**
 * Online, the sync replaces a changed row by deleting and re-inserting it, so whatever fires on
 * the target would act on changes the source never made: a cascade deletes the row's children,
 * a check refuses a parent briefly gone, an audit trigger records a delete. Null when nothing fires.
 */
export function onlineRefusal(table: QualifiedName, actions: TargetAction[], role: TargetRole): ApplicationFailure | null {
  const firing = actions.filter((a) => a.fires);
  if (firing.length === 0) return null;
  const names = firing.map((a) => (a.kind === 'trigger' ? `trigger ${a.name} on ${a.on}` : `foreign key ${a.name} (${a.on} → ${a.references})`));
  const fix = role.replica
    ? 'make them ordinary triggers (ALTER TABLE … ENABLE TRIGGER …: they then stay quiet on Ferry\'s writes, which run as a replica) or drop them until after the cutover'
    : `GRANT SET ON PARAMETER session_replication_role TO ${role.name} (PostgreSQL 15 and later) or run Ferry as a superuser, so that Ferry writes as a replica ` +
      'and they stay quiet; or drop them (or disable the triggers) until after the cutover';
  return refusal(
    FAILURE.TargetTriggersFire,
    `target table ${displayQualified(table)} has ${names.join(', ')}, which would fire on the online sync's delete-and-reinsert of changed rows` +
      `${role.replica ? '' : ` (Ferry's role ${role.name} cannot write as a replica there)`}: ${fix}`,
  );
}
