/**
 * preflight: connect to both sides, learn every table, plan its chunks, and refuse — as a
 * non-retryable failure that names the table and the fix — whatever cannot work.
 */
import { ApplicationFailure } from '@temporalio/common';
import { PoolClient } from 'pg';
import { autoChunkCount, EXACT_PLAN_ROWS, pickBoundaries, rangesFromBoundaries, samplePercent, VALIDATION_UNIT_ROWS, validationUnits } from '../src/core/chunks';
import { blockLayout, BlockLayout, ColumnInfo, estimateRows, listTables, readTables, readUserTypes, TableInfo, typeExists } from '../src/db/catalog';
import { chooseTables } from '../src/core/table-patterns';
import { refusal, sqlState } from '../src/db/errors';
import { readPartitions, targetPartitionName } from '../src/db/partitions';
import { keyAsText, keyFromRow, keyOrder, KeyShape } from '../src/db/ranges';
import { displayQualified, quoteQualified, sameName } from '../src/core/identifiers';
import { describeAction, onlineRefusal, readTargetActions, TargetRole } from '../src/db/target-actions';
import { CapturePlan, ChunkPlan, isKeyless, KeyColumn, MigrationPlan, PLAN_PAGE, SMALL_TABLE_ROWS, TablePlan } from '../src/core/plan';
import { outgrowsPayload, storedHeader, storePlan, TABLES_PAGE } from '../src/db/stored-plan';
import { resolveCapture } from '../src/core/capture-mode';
import { logicalCaptureProblems } from '../src/db/logical-check';
import { MAX_ONLINE_TABLES, MAX_TABLES, Spec, TableSpec } from '../src/core/spec';
import { ActivityDeps } from './deps';
import { planObjects } from '../src/db/object-passes';
import { FAILURE, failureTypeOf } from '../src/core/failure-types';
import { assertColumnsFit } from '../src/db/column-fit';
import { chooseIndexNames, RelationNames } from '../src/db/target-names';
import { secretValue } from './callback-target';

export interface PreflightInput {
  migrationId: string;
  spec: Spec;
  /**
   * The migration's own preflight: a plan of more than PLAN_PAGE tables is stored on the target
   * and returned without its tables (MigrationPlan.stored). Without it (the preflight helper,
   * which changes nothing) such a plan lists only its first PLAN_PAGE tables (moreTables).
   */
  store?: boolean;
}

const SERVER_IDENTITY_SQL = `
SELECT pg_catalog.pg_postmaster_start_time()::text || '/' ||
       (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())::text AS identity,
       pg_catalog.pg_is_in_recovery() AS in_recovery,
       current_setting('server_version') AS version,
       current_setting('server_version_num')::int AS version_num`;

/** The oldest PostgreSQL major version Ferry moves from or to (tested with real builds of 12 to 18). */
const OLDEST_MAJOR = 12;

/**
 * Ferry moves to the same major version or a newer one, from 12 on: a newer source's catalog,
 * types and settings an older target may not have (the opposite of an upgrade), and nothing
 * older than 12 is tested. Refused at the field to change.
 */
function assertVersions(source: { version: string; version_num: number }, target: { version: string; version_num: number }): void {
  const [from, to] = [Math.floor(source.version_num / 10000), Math.floor(target.version_num / 10000)];
  if (from < OLDEST_MAJOR) {
    throw atField(refusal(FAILURE.IncompatibleTarget, `the source runs PostgreSQL ${source.version}; Ferry moves from PostgreSQL ${OLDEST_MAJOR} or newer`), 'source');
  }
  if (to < from) {
    throw atField(
      refusal(
        FAILURE.TargetOlderThanSource,
        `the target runs PostgreSQL ${target.version}, older than the source's ${source.version}: Ferry moves to the same major version or a newer one; point target at a PostgreSQL ${from} or newer server`,
      ),
      'target',
    );
  }
}

/**
 * The refusal with the spec field it is about in front (`target: …`, `tables[37]: …`), as the
 * spec's own refusals have: in a long table list the index is what finds the entry.
 */
function atField(err: unknown, field: string): unknown {
  if (!(err instanceof ApplicationFailure) || !err.nonRetryable) return err;
  return refusal(failureTypeOf(err.type) ?? FAILURE.Refused, `${field}: ${err.message}`, err.cause);
}

/**
 * cutover.approval: event — the workers that will wait for the approval must have a NATS server
 * and the key that verifies approvals: found out now, not when the migration reaches its
 * approval. (A server that is down now is no refusal: the approval's reads are retried until it
 * answers, as the events' publishes are.)
 */
function assertApprovalByEvent(spec: Spec, { events, env }: Pick<ActivityDeps, 'events' | 'env'>): void {
  const secret = spec.cutover?.approval === 'event' ? spec.cutover.approvalSecret : undefined;
  if (secret === undefined) return;
  if (!events?.configured) {
    throw refusal(FAILURE.Refused, 'cutover.approval: event needs the workers to reach NATS: set FERRY_NATS_URL on them, or approve with approval: manual');
  }
  try {
    secretValue(env, secret, 'cutover.approvalSecret');
  } catch (err) {
    throw atField(err, 'cutover.approvalSecret');
  }
}

export function createPreflight({ connections, events, env }: ActivityDeps) {
  return async function preflight({ migrationId, spec, store }: PreflightInput): Promise<MigrationPlan> {
    assertApprovalByEvent(spec, { events, env });
    for (const field of ['source', 'target'] as const) {
      try {
        connections.url(spec[field]);
      } catch (err) {
        throw atField(err, field);
      }
    }
    // The worker sends liveness heartbeats while this plans (src/worker.ts), so a worker lost
    // mid-preflight is noticed within the heartbeat timeout, not the start-to-close timeout.
    return await connections.withClient(spec.source, (source) =>
      connections.withClient(spec.target, async (target) => {
        const tables = await planMigration(source, target, spec);
        const plan = spec.objects === 'all' ? { ...tables, objects: await planObjects(source, target, connections.url(spec.source), spec, tables) } : tables;
        if (!outgrowsPayload(plan)) return plan;
        if (!store) return { ...plan, tables: plan.tables.slice(0, PLAN_PAGE), moreTables: plan.tables.length - PLAN_PAGE };
        await storePlan(target, migrationId, plan);
        return storedHeader(plan, plan.tables.length);
      }),
    );
  };
}

async function planMigration(source: PoolClient, target: PoolClient, spec: Spec): Promise<MigrationPlan> {
  const [src, tgt] = await Promise.all([source.query(SERVER_IDENTITY_SQL), target.query(SERVER_IDENTITY_SQL)]);
  assertVersions(src.rows[0], tgt.rows[0]);
  const sameDatabase = src.rows[0].identity === tgt.rows[0].identity;
  if (spec.mode === 'online' && src.rows[0].in_recovery) {
    throw refusal(
      FAILURE.SourceInRecovery,
      `source connection "${spec.source}" is a hot standby; online mode installs triggers on the source, so point it at the primary`,
    );
  }
  const role = await targetRole(target);
  const tables = await planTables(source, target, spec, await chosenTables(source, spec), role, sameDatabase);
  const capture = spec.mode === 'online' ? await planCapture(source, spec, tables) : undefined;
  return {
    tables,
    sourceServer: src.rows[0].version,
    targetServer: tgt.rows[0].version,
    source: { serverVersion: src.rows[0].version_num },
    target: { serverVersion: tgt.rows[0].version_num },
    targetReplicaRole: role.replica,
    ...(capture ? { capture } : {}),
  };
}

/**
 * Each chosen table's plan, in order. The catalog is read TABLES_PAGE tables at a time, in a few
 * statements on each side per page (readTables): read for 10,000 tables at once, it held the
 * worker's heap at twice its size while they were planned.
 */
async function planTables(source: PoolClient, target: PoolClient, spec: Spec, chosen: TableSpec[], role: TargetRole, sameDatabase: boolean): Promise<TablePlan[]> {
  const tables: TablePlan[] = [];
  const claimed = new RelationNames(target);
  for (let from = 0; from < chosen.length; from += TABLES_PAGE) {
    const page = chosen.slice(from, from + TABLES_PAGE);
    const [sourceInfos, targetInfos] = await Promise.all([readTables(source, page.map((t) => t.source)), readTables(target, page.map((t) => t.target))]);
    for (const [i, table] of page.entries()) {
      const index = from + i;
      const field = table.field ?? `tables[${index}]`;
      if (sameDatabase && sameName(table.source, table.target)) {
        throw refusal(
          FAILURE.SameTable,
          `${field}: ${displayQualified(table.source)}: source and target are the same table in the same database; give it a different target name or connection`,
        );
      }
      try {
        tables.push(await planTable(source, target, spec, table, index, role, claimed, { source: sourceInfos[i], target: targetInfos[i] }));
      } catch (err) {
        throw atField(err, field);
      }
    }
  }
  return tables;
}

/**
 * The tables to move: those the spec names, then those its patterns choose among the source's
 * tables (src/core/table-patterns.ts), by schema and name, each under its own name on the target.
 * A table the spec names is never chosen again by a pattern: its entry (target, chunks) wins.
 */
async function chosenTables(source: PoolClient, spec: Spec): Promise<TableSpec[]> {
  const { selection } = spec;
  if (!selection) {
    assertTableCount(spec, spec.tables.length, 'the spec names');
    return spec.tables;
  }
  const named = new Set(spec.tables.map((t) => displayQualified(t.source)));
  const candidates = (await listTables(source)).filter((t) => !named.has(displayQualified(t)));
  const chosen = chooseTables(
    candidates,
    selection.include.map((i) => i.pattern),
    selection.exclude,
  ).map(({ table, pattern }) => ({ source: table, target: table, field: `${selection.include.find((i) => i.pattern === pattern)!.field} (${pattern.text} chose ${displayQualified(table)})` }));
  const tables = [...spec.tables, ...chosen];
  const patterns = selection.include.map((i) => i.pattern.text).join(', ');
  if (tables.length === 0) {
    throw refusal(FAILURE.MissingTable, `tables: ${patterns} chose no table of the source${selection.exclude.length ? ' (after exclude)' : ''}; check the patterns against the source's schemas`);
  }
  assertTableCount(spec, tables.length, `${patterns} chose`);
  return tables;
}

/** At most MAX_TABLES tables in full mode, MAX_ONLINE_TABLES online (`objects: all` is bounded by the source's lock table: src/db/object-passes.ts). */
function assertTableCount(spec: Spec, count: number, how: string): void {
  const limit = spec.mode === 'online' ? MAX_ONLINE_TABLES : MAX_TABLES;
  if (count > limit) {
    throw refusal(
      FAILURE.Refused,
      `tables: ${how} ${count} tables; one ${spec.mode} migration moves at most ${limit} today (${MAX_TABLES} in full mode, ${MAX_ONLINE_TABLES} online): ` +
        'split it into several specs (by schema, or with exclude:)',
    );
  }
}

/** The spec's capture against what the source allows (docs/architecture.md §6). */
async function planCapture(source: PoolClient, spec: Spec, tables: TablePlan[]): Promise<CapturePlan> {
  const choice = spec.capture ?? 'auto';
  const problems = choice === 'trigger' ? [] : await logicalCaptureProblems(source, tables);
  const resolved = resolveCapture(choice, problems);
  if (!resolved.ok) throw refusal(FAILURE.LogicalCaptureUnavailable, `${resolved.reason} (source connection "${spec.source}")`);
  const keyless = tables.find(isKeyless);
  if (keyless && resolved.plan.mode !== 'logical') {
    throw noKeyRefusal(displayQualified(keyless.source), `logical capture is not possible: ${problems.join('; ')}`);
  }
  return resolved.plan;
}

/** Ferry's role on the target; it writes as a replica as superuser or (PostgreSQL 15 and later) with SET on session_replication_role. */
async function targetRole(db: PoolClient): Promise<TargetRole> {
  const { rows } = await db.query(
    `SELECT quote_ident(r.rolname) AS name, r.rolsuper AS superuser, current_setting('server_version_num')::int AS version
       FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`,
  );
  const { name, superuser, version } = rows[0];
  if (superuser) return { name, replica: true };
  if (version < 150000) return { name, replica: false };
  return { name, replica: (await db.query(`SELECT has_parameter_privilege('session_replication_role', 'SET') AS ok`)).rows[0].ok };
}

/** What a target table contributes to the plan: an existing one checked, a new one named. */
interface TargetFit {
  binary: boolean;
  keyCollateC: boolean;
  notes: string[];
  targetNames: Record<string, string>;
}

async function planTable(
  source: PoolClient,
  target: PoolClient,
  spec: Spec,
  table: TableSpec,
  index: number,
  role: TargetRole,
  claimed: RelationNames,
  read: { source: TableInfo | null; target: TableInfo | null },
): Promise<TablePlan> {
  const info = await checkSourceTable(source, spec, table, read.source);
  const keyColumns: KeyColumn[] = (info.key?.columns ?? []).map((name) => {
    const column = info.columns.find((c) => c.name === name)!;
    return { name, type: column.type, collatable: column.effectiveCollation !== null };
  });
  const copied = info.columns.filter((c) => !c.generated);
  const existing = read.target;
  const fit = existing
    ? await fitExistingTarget(source, target, spec, table, role, info, existing, copied, keyColumns)
    : await planCreatedTarget(source, target, table, claimed, info, copied, keyColumns, spec.objects);

  // The same locale from another C library or ICU release may sort differently: key ranges
  // would then cut the two sides in different places.
  const keyCollateC = fit.keyCollateC || (await keyCollationVersionsDiffer(source, target, info, existing, keyColumns));
  const planned = await planChunks(source, spec, table, info, { keyColumns, keyCollateC }, existing !== null);
  if (spec.mode === 'online') fit.notes.push(...rowFreezeNotes(info));
  fit.notes.unshift(...keyNotes(info, planned.copyBy));
  return {
    index,
    source: table.source,
    target: table.target,
    columns: copied.map((c) => c.name),
    keyColumns,
    copyFormat: fit.binary ? 'binary' : 'text',
    keyCollateC,
    rowsEstimated: info.estimatedRows,
    chunks: planned.chunks,
    validationUnits: planned.validationUnits,
    ...(planned.copyBy ? { copyBy: planned.copyBy } : {}),
    targetExisted: existing !== null,
    sourceWrites: info.writes,
    ...(fit.notes.length > 0 ? { notes: fit.notes } : {}),
    ...(Object.keys(fit.targetNames).length > 0 ? { targetNames: fit.targetNames } : {}),
  };
}

/** What the plan says of how a table is keyed and copied, where it is not by its primary key's ranges. */
function keyNotes(info: TableInfo, copyBy: TablePlan['copyBy']): string[] {
  if (!info.key && copyBy === 'snapshot') {
    return [
      'no key: copied whole in one snapshot at a known WAL position, its changes applied as whole rows (REPLICA IDENTITY FULL) exactly once from there, ' +
        'validated whole at a position; a difference fails the table, as it cannot be repaired row by row',
    ];
  }
  if (!info.key) {
    return ['no key: copied by ranges of blocks and validated by a checksum of each whole side; a difference fails the table, as it cannot be repaired range by range'];
  }
  const notes: string[] = [];
  if (info.key.kind !== 'primary key') notes.push(`no primary key: keyed by ${info.key.kind} ${info.key.name} (${info.key.columns.join(', ')}), whose columns are NOT NULL`);
  if (copyBy === 'blocks') notes.push('copied by ranges of blocks (read in physical order), validated and repaired by ranges of its key');
  return notes;
}

/**
 * Why the freeze of this table must act row by row, not only on statements (installCapture reads
 * the same catalog when it installs it): writes through a legacy inheritance parent, and a
 * subscription's apply worker, fire no statement trigger of this table.
 */
function rowFreezeNotes(info: TableInfo): string[] {
  const notes: string[] = [];
  const what = 'fire no statement trigger of its own, so the cutover freezes it row by row';
  if (info.inheritsFrom.length > 0) notes.push(`inherits from ${info.inheritsFrom.join(', ')}: writes made through the parent ${what}`);
  for (const subscription of info.subscriptions) {
    notes.push(
      `written by subscription ${subscription}: its apply worker's writes ${what}; after the cutover its changes are refused on the source until it is disabled or pointed at the target (ALTER SUBSCRIPTION ${subscription} DISABLE)`,
    );
  }
  return notes;
}

/** The source table, refused unless it exists, is a table, has a key (online mode) and is readable; with its row estimate. */
async function checkSourceTable(source: PoolClient, spec: Spec, table: TableSpec, info: TableInfo | null): Promise<TableInfo> {
  const label = displayQualified(table.source);
  if (!info) {
    throw refusal(
      FAILURE.MissingTable,
      `table ${label} does not exist on source connection "${spec.source}": check the schema and name (quoted names are case-sensitive)`,
    );
  }
  if (info.relkind !== 'r' && info.relkind !== 'p') {
    throw refusal(FAILURE.NotATable, `${label} is not a table (relkind ${info.relkind}); Ferry migrates tables only`);
  }
  if (info.inheritedBy.length > 0) {
    throw refusal(
      FAILURE.UnsupportedTable,
      `${label} has inheritance children (${info.inheritedBy.join(', ')}): reading it reads their rows too, whose keys its primary key does not cover, ` +
        `and writes to them bypass its triggers; Ferry moves declaratively partitioned tables, not legacy inheritance trees — move the children as tables of their own ` +
        `and the parent's rows after ALTER TABLE child NO INHERIT ${label}, or convert the tree to declarative partitioning`,
    );
  }
  if (!info.key && spec.mode === 'online') await assertKeylessCapturable(source, spec, table);
  await assertReadable(source, info, label, spec.source);
  info.estimatedRows = await estimateRows(source, info);
  return info;
}

/** Online, a table without a key moves only with logical capture (checked here, where the refusal can name its field). */
async function assertKeylessCapturable(source: PoolClient, spec: Spec, table: TableSpec): Promise<void> {
  const label = displayQualified(table.source);
  if (spec.capture === 'trigger') throw noKeyRefusal(label, 'capture: trigger logs keys');
  const problems = await logicalCaptureProblems(source, [{ source: table.source, keyColumns: [] }]);
  if (problems.length > 0) throw noKeyRefusal(label, `logical capture is not possible: ${problems.join('; ')}`);
}

/**
 * An online migration of a table without a key needs logical capture with REPLICA IDENTITY FULL
 * (its changes arrive as whole rows); `why` says why it cannot have it.
 */
function noKeyRefusal(label: string, why: string): Error {
  return refusal(
    FAILURE.NoPrimaryKey,
    `table ${label} has no primary key and no unique index over NOT NULL columns: online, such a table moves only by logical capture of whole rows ` +
      `(capture: logical or auto, and REPLICA IDENTITY FULL), and ${why}; or add a key (ALTER TABLE ${label} ADD PRIMARY KEY (…)), ` +
      'or move the table in full mode while its writers are stopped (it is then copied by ranges of blocks)',
  );
}

/** A target table Ferry creates: its partitions and types must be creatable, its index names free. */
async function planCreatedTarget(
  source: PoolClient,
  target: PoolClient,
  table: TableSpec,
  claimed: RelationNames,
  info: TableInfo,
  copied: ColumnInfo[],
  keyColumns: KeyColumn[],
  objects: Spec['objects'],
): Promise<TargetFit> {
  if (info.relkind === 'p') await assertPartitionsCreatable(source, target, table);
  // With objects: all, the dump's first pass makes the types (their extensions too), checked by planObjects.
  if (objects !== 'all') await assertTypesCreatable(source, target, info, displayQualified(table.source));
  const keyCollateC = await keyCollationDiffers(target, info, keyColumns);
  const { targetNames, notes } = await chooseIndexNames(info, table, claimed);
  return { binary: copied.every((c) => c.binaryPortable), keyCollateC, notes, targetNames };
}

/**
 * A target table that exists already: it must take every copied column and value, add no
 * NOT NULL column the source cannot fill, have the source's key, be empty (or truncated), and
 * (online) have no trigger or foreign key that would act on Ferry's writes.
 */
async function fitExistingTarget(
  source: PoolClient,
  target: PoolClient,
  spec: Spec,
  table: TableSpec,
  role: TargetRole,
  info: TableInfo,
  existing: TableInfo,
  copied: ColumnInfo[],
  keyColumns: KeyColumn[],
): Promise<TargetFit> {
  const label = displayQualified(table.source);
  const targetLabel = displayQualified(table.target);
  if (existing.relkind !== 'r' && existing.relkind !== 'p') {
    throw refusal(FAILURE.IncompatibleTarget, `target ${targetLabel} exists and is not a table; choose another target name`);
  }
  const binary = assertTargetColumns(existing, copied, label, targetLabel);
  const fitNotes = await assertColumnsFit(source, target, info, existing, copied, label, targetLabel);
  assertNoUnfilledColumns(existing, copied, label, targetLabel);
  const keyCollateC = assertTargetKey(info, existing, keyColumns, targetLabel);
  const nonEmpty = await target.query(`SELECT EXISTS (SELECT 1 FROM ${quoteQualified(table.target)}) AS rows`);
  if (nonEmpty.rows[0].rows && !spec.truncate) {
    throw refusal(
      FAILURE.TargetNotEmpty,
      `target table ${targetLabel} already has rows: empty it, or set truncate: true to let Ferry replace its contents`,
    );
  }
  const actions = await readTargetActions(target, table.target, role.replica);
  const refused = spec.mode === 'online' ? onlineRefusal(table.target, actions, role) : null;
  if (refused) throw refused;
  return { binary, keyCollateC, notes: [...fitNotes, ...actions.map(describeAction)], targetNames: {} };
}

/** Every copied column must exist (not generated) in the target; binary COPY only when every type is the same and portable. */
function assertTargetColumns(existing: TableInfo, copied: ColumnInfo[], label: string, targetLabel: string): boolean {
  let binary = copied.every((c) => c.binaryPortable);
  for (const column of copied) {
    const other = existing.columns.find((c) => c.name === column.name);
    if (!other || other.generated) {
      throw refusal(
        FAILURE.IncompatibleTarget,
        `target table ${targetLabel} has no column "${column.name}" (type ${column.type}) that source ${label} has: add it to the target or drop the target table so Ferry creates it`,
      );
    }
    if (other.type !== column.type) binary = false;
  }
  return binary;
}

/** A target-only column must be fillable without the source: nullable, defaulted, generated or identity. */
function assertNoUnfilledColumns(existing: TableInfo, copied: ColumnInfo[], label: string, targetLabel: string): void {
  for (const other of existing.columns) {
    if (!copied.some((c) => c.name === other.name) && other.notNull && other.defaultExpr === null && !other.generated && other.identity === '') {
      throw refusal(
        FAILURE.IncompatibleTarget,
        `target table ${targetLabel} has NOT NULL column "${other.name}" without a default that source ${label} does not have: give it a default or drop it`,
      );
    }
  }
}

/**
 * The target must have the source's key — as its primary key or as a unique index over NOT NULL
 * columns, whichever the source's is — column for column and type for type; returns whether key
 * collations differ.
 */
function assertTargetKey(info: TableInfo, existing: TableInfo, keyColumns: KeyColumn[], targetLabel: string): boolean {
  if (!info.key) return false; // a table without a key needs none on the target either
  const wanted = info.key.columns.join('\u0000');
  if (!existing.keys.some((k) => k.columns.join('\u0000') === wanted)) {
    const has = existing.keys.map((k) => `${k.kind} (${k.columns.join(', ')})`).join(', ') || 'none';
    throw refusal(
      FAILURE.IncompatibleTarget,
      `target table ${targetLabel} must have the source's key (${info.key.columns.join(', ')}) as its primary key or a unique index over NOT NULL columns; it has ${has}`,
    );
  }
  let keyCollateC = false;
  for (const key of keyColumns) {
    const other = existing.columns.find((c) => c.name === key.name)!;
    const mine = info.columns.find((c) => c.name === key.name)!;
    if (other.type !== key.type) {
      throw refusal(
        FAILURE.IncompatibleTarget,
        `target table ${targetLabel}: key column "${key.name}" is ${other.type} but ${key.type} on the source; make the key types equal`,
      );
    }
    if (key.collatable && !sameCollation(other.effectiveCollation, mine.effectiveCollation)) keyCollateC = true;
  }
  return keyCollateC;
}

/** The table's chunks (by sampled key boundaries) and, for a large table under validation, its validation units. */
async function planChunks(
  source: PoolClient,
  spec: Spec,
  table: TableSpec,
  info: TableInfo,
  shape: KeyShape,
  targetExists: boolean,
): Promise<Pick<TablePlan, 'chunks' | 'validationUnits' | 'copyBy'>> {
  const chunkCount = table.chunks ?? autoChunkCount(info.estimatedRows, spec.parallelism.chunks);
  // Online, a table without a key is read whole in one snapshot at a known position (src/db/keyless-ops.ts).
  if (!info.key && spec.mode === 'online') return { chunks: [{ index: 0, lower: null, upper: null }], copyBy: 'snapshot' };
  if (!info.key) return { chunks: blockChunks(await blockLayout(source, info.name), chunkCount), copyBy: 'blocks' };
  const layout = copiesByBlocks(spec, info, targetExists) ? await blockLayout(source, info.name) : null;
  const byBlocks = layout?.tidRanges === true;
  const needsUnits = (info.estimatedRows > chunkCount * VALIDATION_UNIT_ROWS && spec.validation !== 'none') || byBlocks;
  const sample = chunkCount > 1 || needsUnits ? await sampleKeys(source, info, shape) : [];
  const chunks = rangesFromBoundaries(chunkCount > 1 ? pickBoundaries(sample, chunkCount) : []);
  if (!byBlocks) return { chunks, validationUnits: needsUnits ? validationUnits(sample, chunks, info.estimatedRows) : undefined };
  // Copied by blocks, validated and repaired by the key ranges the chunks would have had: each
  // unit under the fence of a chunk of blocks (any chunk's will do: a repair takes its range).
  const blocks = blockChunks(layout!, chunkCount);
  const units = validationUnits(sample, chunks, info.estimatedRows);
  const keyed = units.length > 0 ? units : chunks.map((c) => ({ chunk: c.index, lower: c.lower, upper: c.upper }));
  return { chunks: blocks, validationUnits: keyed.map((u) => ({ ...u, chunk: Math.min(u.chunk, blocks.length - 1) })), copyBy: 'blocks' };
}

/**
 * Full mode reads a large keyed table by ranges of blocks: each page once, in physical order,
 * where ranges of its key read the pages their keys are on (0.71–0.88× the time, docs/
 * benchmarks.md). Only where a row that a write moved and the copy read twice cannot stop a batch:
 * a table Ferry creates and loads without its key (not a partitioned one, created with it), whose
 * key build then drops such twins for validation — never `none` here — to copy again by key.
 */
function copiesByBlocks(spec: Spec, info: TableInfo, targetExists: boolean): boolean {
  return spec.mode === 'full' && spec.validation !== 'none' && !targetExists && info.relkind === 'r' && info.estimatedRows > SMALL_TABLE_ROWS;
}

/**
 * A table in `count` ranges of its blocks (blockLayout), of its largest partition's for a
 * partitioned one (a TID range applies to each partition's own blocks), the last open-ended for
 * blocks added meanwhile. One chunk before PostgreSQL 14, which has no TID range scans: every
 * range would read the whole table.
 */
function blockChunks(layout: BlockLayout, count: number): ChunkPlan[] {
  const { blocks } = layout;
  const n = layout.tidRanges ? Math.max(1, Math.min(count, blocks)) : 1;
  const at = (i: number) => [String(Math.floor((i * blocks) / n))];
  return Array.from({ length: n }, (_, i) => ({ index: i, lower: i === 0 ? null : at(i), upper: i === n - 1 ? null : at(i + 1) }));
}

/** With row_security=off a table whose policies would hide rows raises 42501 instead. */
async function assertReadable(db: PoolClient, info: TableInfo, label: string, connection: string): Promise<void> {
  try {
    await db.query(`SELECT 1 FROM ${info.identText} LIMIT 1`);
  } catch (err) {
    const code = sqlState(err);
    if (code === '42501') {
      throw refusal(
        FAILURE.RowSecurity,
        `${label} on connection "${connection}" is not fully readable: row-level security or privileges hide rows from Ferry's role; run Ferry as the table owner or a role with BYPASSRLS and SELECT`,
        err as Error,
      );
    }
    throw err;
  }
}

/** Ferry creates the partitions too, under their own names: none of those names may be taken. */
async function assertPartitionsCreatable(source: PoolClient, target: PoolClient, table: TableSpec): Promise<void> {
  const taken = new Map<string, string>();
  for (const partition of await readPartitions(source, table.source)) {
    const name = targetPartitionName(partition.name, table.target);
    const label = displayQualified(name);
    const other = taken.get(label);
    if (other) {
      throw refusal(
        FAILURE.IncompatibleTarget,
        `partitions ${other} and ${displayQualified(partition.name)} of ${displayQualified(table.source)} would both become ${label} on the target; rename one of them`,
      );
    }
    taken.set(label, displayQualified(partition.name));
    const exists = await target.query('SELECT to_regclass($1) IS NOT NULL AS present', [quoteQualified(name)]);
    if (exists.rows[0].present) {
      throw refusal(
        FAILURE.IncompatibleTarget,
        `target ${label} exists, and Ferry would create it as partition ${displayQualified(partition.name)} of ${displayQualified(table.target)}: ` +
          'drop it, or create the partitioned target table yourself',
      );
    }
  }
}

async function assertTypesCreatable(source: PoolClient, target: PoolClient, info: TableInfo, label: string): Promise<void> {
  const types = await readUserTypes(source, info.columns.map((c) => c.typeOid));
  for (const type of types) {
    const there = await typeExists(target, type.name);
    const typeLabel = displayQualified(type.name);
    if (there) {
      if (type.kind === 'e') {
        const missing = type.enumLabels.filter((l) => !there.labels.includes(l));
        if (there.kind !== 'e' || missing.length > 0) {
          throw refusal(
            FAILURE.IncompatibleTarget,
            `type ${typeLabel} on the target is not the source's enum (missing ${missing.map((m) => `'${m}'`).join(', ') || 'enum kind'}): align it or drop it`,
          );
        }
      }
      continue;
    }
    if (type.kind !== 'e' && type.kind !== 'd') {
      throw refusal(
        FAILURE.UnsupportedType,
        `${label} uses type ${typeLabel}, which the target lacks and Ferry does not create: create it there (or install its extension) first`,
      );
    }
  }
}

/**
 * Whether two effective collations (`name:locale`, as the catalog reads them) order text the
 * same: by locale, not by name, and with the locale's codeset spelled either way
 * (`en_US.UTF-8` is `en_US.utf8`). Comparing by name forced COLLATE "C" on both sides for two
 * spellings of one locale, and every key range then became a scan and a sort.
 */
export function sameCollation(a: string | null, b: string | null): boolean {
  return normalizedCollation(a) === normalizedCollation(b);
}

function normalizedCollation(effective: string | null): string {
  if (effective === null) return '';
  const at = effective.indexOf(':');
  const locale = at >= 0 ? effective.slice(at + 1) : '';
  // ICU collations keep their locale in the name (collcollate is empty for them).
  if (locale === '') return effective.toLowerCase();
  const [language, codeset] = locale.split('.');
  if (language === 'C' || language === 'POSIX') return 'c';
  return codeset === undefined ? language : `${language}.${codeset.toLowerCase().replace(/-/g, '')}`;
}

async function keyCollationDiffers(target: PoolClient, info: TableInfo, keys: KeyColumn[]): Promise<boolean> {
  const collatable = keys.filter((k) => k.collatable);
  if (collatable.length === 0) return false;
  const targetDefault = (
    await target.query(`SELECT 'default:' || datcollate AS c FROM pg_catalog.pg_database WHERE datname = current_database()`)
  ).rows[0].c;
  for (const key of collatable) {
    const column = info.columns.find((c) => c.name === key.name)!;
    if (column.collation === null) {
      if (!sameCollation(column.effectiveCollation, targetDefault)) return true;
    } else {
      const name = column.collation.split('.').pop()!.replace(/^"|"$/g, '');
      const found = await target.query(
        `SELECT collname || ':' || coalesce(collcollate, '') AS c FROM pg_catalog.pg_collation WHERE collname = $1`,
        [name],
      );
      if (found.rowCount === 0) {
        throw refusal(
          FAILURE.IncompatibleTarget,
          `${displayQualified(info.name)}: key column "${key.name}" uses collation ${column.collation}, which the target database lacks: create it there first`,
        );
      }
      if (!sameCollation(found.rows[0].c, column.effectiveCollation)) return true;
    }
  }
  return false;
}

/**
 * Whether a collatable key column's collation has a different version on the two sides: the
 * version the library reports now (`pg_collation_actual_version`; the database default's from
 * PostgreSQL 15). Where either side reports none (C, POSIX, PostgreSQL 14's default), the locale
 * comparison above stands.
 */
async function keyCollationVersionsDiffer(source: PoolClient, target: PoolClient, info: TableInfo, existing: TableInfo | null, keys: KeyColumn[]): Promise<boolean> {
  for (const key of keys.filter((k) => k.collatable)) {
    const mine = info.columns.find((c) => c.name === key.name)!;
    // A created target column carries the source column's collation by name.
    const theirs = existing ? existing.columns.find((c) => c.name === key.name)!.collation : mine.collation;
    if (collationVersionsDiffer(await collationVersion(source, mine.collation), await collationVersion(target, theirs))) return true;
  }
  return false;
}

export function collationVersionsDiffer(a: string, b: string): boolean {
  return a !== '' && b !== '' && a !== b;
}

/** The version of a collation (qualified and quoted, or null for the database default); '' when none is reported. */
async function collationVersion(db: PoolClient, collation: string | null): Promise<string> {
  if (collation === null) {
    // pg_database_collation_actual_version exists from PostgreSQL 15 (a query naming it fails to parse before).
    const version = Number((await db.query(`SELECT current_setting('server_version_num') AS n`)).rows[0].n);
    if (version < 150000) return '';
    const { rows } = await db.query(`SELECT pg_catalog.pg_database_collation_actual_version(oid) AS v FROM pg_catalog.pg_database WHERE datname = current_database()`);
    return rows[0]?.v ?? '';
  }
  const { rows } = await db.query(
    `SELECT pg_catalog.pg_collation_actual_version(c.oid) AS v FROM pg_catalog.pg_collation c JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace
      WHERE quote_ident(n.nspname) || '.' || quote_ident(c.collname) = $1`,
    [collation],
  );
  return rows[0]?.v ?? '';
}

async function sampleKeys(db: PoolClient, info: TableInfo, shape: KeyShape) {
  const sample = info.estimatedRows <= EXACT_PLAN_ROWS ? '' : ` TABLESAMPLE SYSTEM (${samplePercent(info.estimatedRows)})`;
  const { rows } = await db.query(`SELECT ${keyAsText(shape)} FROM ${info.identText}${sample} ORDER BY ${keyOrder(shape)}`);
  return rows.map((row) => keyFromRow(row, shape));
}
