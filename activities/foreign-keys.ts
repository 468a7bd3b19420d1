/**
 * Foreign keys on the target, in two steps so that neither scans a table under a lock writers
 * wait on: addForeignKeys adds every foreign key NOT VALID (catalog only, a brief lock), and
 * validateForeignKey checks one (VALIDATE CONSTRAINT: a scan, but writers go on); a partitioned
 * table's key takes the same two steps on each of its partitions, then is added on the parent
 * (src/db/partitioned-foreign-keys.ts). Tables the
 * user prepared keep their own foreign keys; a key to a table that is neither migrated nor on
 * the target is skipped and reported.
 *
 * finishTarget sets the target's sequences to the source's positions and reports tables that
 * took writes during a full-mode copy.
 */
import { ClientBase } from 'pg';
import { markCompleted } from '../src/db/bookkeeping';
import { readSourceTables, TableInfo } from '../src/db/catalog';
import { inTransaction } from '../src/db/connections';
import { addForeignKeySql, foreignKeyDefinition } from '../src/db/ddl';
import { addOnLeaves, validateOnLeavesAndAdopt } from '../src/db/partitioned-foreign-keys';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified, sameName } from '../src/core/identifiers';
import { TablePlan } from '../src/core/plan';
import { tablesOrStored } from '../src/db/stored-plan';
import { ActivityDeps } from './deps';
import { copySequencePosition, copySequencePositions } from '../src/db/sequences';

type TableRef = Pick<TablePlan, 'source' | 'target' | 'targetExisted' | 'sourceWrites'>;

export interface TargetTablesInput {
  source: string;
  target: string;
  tables: TableRef[];
  /** A stored plan's migration (MigrationPlan.stored): its tables are read on the target, `tables` is empty. */
  storedFor?: string;
}


export interface FinishTargetInput extends TargetTablesInput {
  /** Absent in executions of an older Ferry (nothing is marked then). */
  migrationId?: string;
  /** `objects: all`: sequences no column owns (ObjectsPlan.sequences), set to the source's positions too. */
  sequences?: QualifiedName[];
}

export interface ForeignKeyRef {
  table: QualifiedName;
  name: string;
}

async function readAll(db: ClientBase, tables: TableRef[]): Promise<{ plan: TableRef; info: TableInfo }[]> {
  const infos = await readSourceTables(db, tables.map((t) => t.source));
  return tables.map((plan, i) => ({ plan, info: infos[i] }));
}

export function createForeignKeyActivities({ connections }: ActivityDeps) {
  async function addForeignKeys(input: TargetTablesInput): Promise<{ foreignKeys: ForeignKeyRef[]; skipped: string[] }> {
    const foreignKeys: ForeignKeyRef[] = [];
    const skipped: string[] = [];
    await connections.withClient(input.source, (source) =>
      connections.withClient(input.target, async (target) => {
        const tables = await readAll(source, await tablesOrStored(target, input));
        for (const { plan, info } of tables.filter((t) => !t.plan.targetExisted)) {
          for (const fk of info.foreignKeys) {
            const mapped = tables.find((t) => sameName(t.plan.source, fk.referenced))?.plan.target ?? fk.referenced;
            const exists = await target.query('SELECT 1 FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2', [
              quoteQualified(plan.target),
              fk.name,
            ]);
            if (!exists.rowCount) {
              const referenced = await target.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(mapped)]);
              if (!referenced.rows[0].present) {
                skipped.push(`${displayQualified(plan.target)}.${fk.name} → ${displayQualified(mapped)}`);
                continue;
              }
              // A partitioned table's key goes on its partitions first (src/db/partitioned-foreign-keys.ts).
              // Ferry made the target as the source is (only tables it created get keys here).
              if (info.relkind === 'p') await addOnLeaves(target, plan.target, fk.name, foreignKeyDefinition(fk, mapped));
              else await target.query(addForeignKeySql(fk, plan.target, mapped));
            }
            foreignKeys.push({ table: plan.target, name: fk.name });
          }
        }
      }),
    );
    return { foreignKeys, skipped };
  }

  async function validateForeignKey(input: { target: string; foreignKey: ForeignKeyRef }): Promise<{ validated: boolean }> {
    const { table, name } = input.foreignKey;
    return await connections.withClient(input.target, async (db) => {
      const { rows } = await db.query('SELECT convalidated FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2', [
        quoteQualified(table),
        name,
      ]);
      if (rows.length > 0 && rows[0].convalidated) return { validated: false };
      await db.query('SET statement_timeout = 0');
      try {
        // A partitioned table's key is on its partitions until they are validated, then adopted.
        if (rows.length === 0) return { validated: await validateOnLeavesAndAdopt(db, table, name) };
        await db.query(`ALTER TABLE ${quoteQualified(table)} VALIDATE CONSTRAINT ${quoteIdent(name)}`);
      } finally {
        await db.query('RESET statement_timeout').catch(() => undefined);
      }
      return { validated: true };
    });
  }

  /** Sequence positions, then the mark that the target is complete (one transaction). */
  async function finishTarget(input: FinishTargetInput): Promise<{ writtenDuringCopy: { table: string; changes: number }[] }> {
    const writtenDuringCopy: { table: string; changes: number }[] = [];
    await connections.withClient(input.source, (source) =>
      connections.withClient(input.target, (target) =>
        inTransaction(target, async () => {
          for (const { plan, info } of await readAll(source, await tablesOrStored(target, input))) {
            // Table statistics count every insert, update and delete since the server started.
            if (info.writes > plan.sourceWrites) writtenDuringCopy.push({ table: displayQualified(plan.source), changes: info.writes - plan.sourceWrites });
            await copySequencePositions(source, target, info, plan.target);
          }
          for (const sequence of input.sequences ?? []) await copySequencePosition(source, target, sequence);
          if (input.migrationId) await markCompleted(target, input.migrationId);
        }),
      ),
    );
    return { writtenDuringCopy };
  }

  return { addForeignKeys, validateForeignKey, finishTarget };
}
