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
import { displayQualified, QualifiedName, quoteIdent, quoteQualified } from '../src/core/identifiers';
import { TablePlan } from '../src/core/plan';
import { tablePages } from '../src/db/stored-plan';
import { ActivityDeps } from './deps';
import { copySequencePositions, SequenceToCarry } from '../src/db/sequences';

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

function nameKey(name: QualifiedName): string {
  return JSON.stringify([name.schema, name.name]);
}

/** Where each moved table lands, by its source name: names only, however many tables. */
async function targetsBySource(target: ClientBase, input: TargetTablesInput): Promise<Map<string, QualifiedName>> {
  const movedTo = new Map<string, QualifiedName>();
  for await (const page of tablePages(target, input)) for (const t of page) if (!movedTo.has(nameKey(t.source))) movedTo.set(nameKey(t.source), t.target);
  return movedTo;
}

/**
 * Adds one foreign key NOT VALID unless the target has it already; false (nothing added) when
 * the table it references is neither moved nor on the target.
 */
async function addForeignKey(target: ClientBase, table: QualifiedName, info: TableInfo, fk: TableInfo['foreignKeys'][number], mapped: QualifiedName): Promise<boolean> {
  const exists = await target.query('SELECT 1 FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2', [quoteQualified(table), fk.name]);
  if (exists.rowCount) return true;
  const referenced = await target.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(mapped)]);
  if (!referenced.rows[0].present) return false;
  // A partitioned table's key goes on its partitions first (src/db/partitioned-foreign-keys.ts).
  // Ferry made the target as the source is (only tables it created get keys here).
  if (info.relkind === 'p') await addOnLeaves(target, table, fk.name, foreignKeyDefinition(fk, mapped));
  else await target.query(addForeignKeySql(fk, table, mapped));
  return true;
}

export function createForeignKeyActivities({ connections }: ActivityDeps) {
  async function addForeignKeys(input: TargetTablesInput): Promise<{ foreignKeys: ForeignKeyRef[]; skipped: string[] }> {
    const foreignKeys: ForeignKeyRef[] = [];
    const skipped: string[] = [];
    await connections.withClient(input.source, (source) =>
      connections.withClient(input.target, async (target) => {
        const movedTo = await targetsBySource(target, input);
        for await (const page of tablePages(target, input)) {
          for (const { plan, info } of await readAll(source, page.filter((t) => !t.targetExisted))) {
            for (const fk of info.foreignKeys) {
              const mapped = movedTo.get(nameKey(fk.referenced)) ?? fk.referenced;
              if (await addForeignKey(target, plan.target, info, fk, mapped)) foreignKeys.push({ table: plan.target, name: fk.name });
              else skipped.push(`${displayQualified(plan.target)}.${fk.name} → ${displayQualified(mapped)}`);
            }
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
          const sequences: SequenceToCarry[] = (input.sequences ?? []).map((sequence) => ({ source: sequence, target: sequence }));
          for await (const page of tablePages(target, input)) {
            for (const { plan, info } of await readAll(source, page)) {
              // Table statistics count every insert, update and delete since the server started.
              if (info.writes > plan.sourceWrites) writtenDuringCopy.push({ table: displayQualified(plan.source), changes: info.writes - plan.sourceWrites });
              for (const seq of info.sequences) sequences.push({ source: seq.name, table: plan.target, column: seq.column });
            }
          }
          await copySequencePositions(source, target, sequences);
          if (input.migrationId) await markCompleted(target, input.migrationId);
        }),
      ),
    );
    return { writtenDuringCopy };
  }

  return { addForeignKeys, validateForeignKey, finishTarget };
}
