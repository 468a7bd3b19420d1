/**
 * After the load: secondary indexes, unique and exclusion constraints, foreign keys (NOT VALID,
 * then VALIDATE), sequence positions copied from the source's last_value, and ANALYZE.
 * Every step checks what exists first, so a retry repeats nothing.
 */
import { ClientBase } from 'pg';
import { readSourceTables, TableInfo } from '../../src/db/catalog';
import { addConstraintSql, addForeignKeySql, createIndexSql } from '../../src/db/ddl';
import { displayQualified, QualifiedName, quoteIdent, quoteQualified, sameName } from '../../src/core/identifiers';
import { TablePlan, targetIndexName } from '../../src/core/plan';
import { copySequencePositions } from '../../src/db/sequences';
import { ActivityDeps } from '../deps';

export interface FinalizeTargetInput {
  migrationId: string;
  source: string;
  target: string;
  tables: Pick<TablePlan, 'source' | 'target' | 'targetExisted' | 'sourceWrites' | 'targetNames'>[];
  /**
   * all (full mode); online mode splits it: `indexes` (non-unique, before the freeze: a live
   * sync cannot violate them) and `constraints` (unique, foreign keys, sequences, ANALYZE — after
   * the final drain, when the data is final).
   */
  part?: 'all' | 'indexes' | 'constraints';
}

export interface FinalizeTargetResult {
  indexes: number;
  constraints: number;
  foreignKeys: number;
  /** Foreign keys not added because the table they reference is neither migrated nor on the target. */
  skippedForeignKeys: string[];
  /** Tables whose source took writes after preflight (full mode assumes a quiet source). */
  writtenDuringCopy: { table: string; changes: number }[];
}

async function constraintExists(db: ClientBase, table: QualifiedName, name: string): Promise<{ validated: boolean } | null> {
  const { rows } = await db.query(
    `SELECT convalidated AS validated FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2`,
    [quoteQualified(table), name],
  );
  return rows[0] ?? null;
}

async function relationExists(db: ClientBase, name: QualifiedName): Promise<boolean> {
  const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(name)]);
  return rows[0].present;
}

export function createFinalizeTarget({ connections }: ActivityDeps) {
  return async function finalizeTarget(input: FinalizeTargetInput): Promise<FinalizeTargetResult> {
    const result: FinalizeTargetResult = { indexes: 0, constraints: 0, foreignKeys: 0, skippedForeignKeys: [], writtenDuringCopy: [] };
    return await connections.withClient(input.source, (source) =>
      connections.withClient(input.target, async (target) => {
        // A long index build must not hit the session's statement timeout.
        await target.query('SET statement_timeout = 0');
        try {
          const infos: { plan: FinalizeTargetInput['tables'][number]; info: TableInfo }[] = [];
          const read = await readSourceTables(source, input.tables.map((t) => t.source));
          for (const [i, plan] of input.tables.entries()) {
            const info = read[i];
            // Table statistics count every insert, update and delete since the server started.
            if (info.writes > plan.sourceWrites) {
              result.writtenDuringCopy.push({ table: displayQualified(plan.source), changes: info.writes - plan.sourceWrites });
            }
            infos.push({ plan, info });
          }
          const part = input.part ?? 'all';
          const plainIndexes = part !== 'constraints';
          const constraints = part !== 'indexes';
          for (const { plan, info } of infos.filter((t) => !t.plan.targetExisted)) {
            for (const index of info.indexes) {
              const unique = /^CREATE UNIQUE /.test(index.definition);
              if (unique ? !constraints : !plainIndexes) continue;
              await target.query(createIndexSql(index, info, plan.target, targetIndexName(plan, index.name)));
              result.indexes += 1;
            }
            if (!constraints) continue;
            for (const unique of info.uniques) {
              const name = targetIndexName(plan, unique.name);
              if (await constraintExists(target, plan.target, name)) continue;
              await target.query(addConstraintSql(unique, plan.target, name));
              result.constraints += 1;
            }
          }
          if (!constraints) return result;
          for (const { plan, info } of infos.filter((t) => !t.plan.targetExisted)) {
            for (const fk of info.foreignKeys) {
              const mapped = infos.find((t) => sameName(t.plan.source, fk.referenced))?.plan.target ?? fk.referenced;
              const existing = await constraintExists(target, plan.target, fk.name);
              if (!existing) {
                if (!(await relationExists(target, mapped))) {
                  result.skippedForeignKeys.push(`${displayQualified(plan.target)}.${fk.name} → ${displayQualified(mapped)}`);
                  continue;
                }
                await target.query(addForeignKeySql(fk, plan.target, mapped));
              }
              if (!existing?.validated) {
                await target.query(`ALTER TABLE ${quoteQualified(plan.target)} VALIDATE CONSTRAINT ${quoteIdent(fk.name)}`);
                result.foreignKeys += 1;
              }
            }
          }
          await copySequencePositions(
            source,
            target,
            infos.flatMap(({ plan, info }) => info.sequences.map((seq) => ({ source: seq.name, table: plan.target, column: seq.column }))),
          );
          for (const { plan } of infos) await target.query(`ANALYZE ${quoteQualified(plan.target)}`);
          return result;
        } finally {
          await target.query('RESET statement_timeout').catch(() => undefined);
        }
      }),
    );
  };
}
