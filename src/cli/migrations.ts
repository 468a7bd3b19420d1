/** `ferry start | status | result | list | validate`. */
import { Command, InvalidArgumentError, Option } from 'commander';
import { FerryClient } from '../client';
import type { ChangePlan } from '../core/change-plan';
import { displayQualified } from '../core/identifiers';
import type { MigrationPlan, ObjectsPlan } from '../core/plan';
import type { Spec } from '../core/spec';
import { loadSpecFile, loadSpecOrPlanFile } from '../spec-file';
import { formatChangeResult, formatChangeStatus, watchChange } from '../view/change-format';
import { MIGRATION_STATES } from '../core/state-machine';
import { formatResult, formatStatus } from '../view/format';
import { audited, auditOf } from './control';
import { CliExit, printJson } from './output';
import { formatList } from '../view/list';
import { watch } from '../view/watch';

interface StartOptions {
  id?: string;
  wait?: boolean;
  json?: boolean;
  actor?: string;
  reason?: string;
}

export function registerMigrationCommands(program: Command): void {
  audited(
    program
      .command('start')
      .description('validate SPEC (a migration, or a change plan with kind: change), run preflight on the workers, start it and print its id')
      .argument('<spec>', 'spec file (.yaml, .yml or .json; - for stdin)')
      .option('--id <id>', 'migration id (overrides spec.id)')
      .option('--wait', 'wait for the migration to end; exit 0 only if it succeeded')
      .addOption(new Option('--json', 'print JSON')),
  ).action(startCommand);

  program
    .command('watch')
    .description('follow a migration until it ends: progress bars per table (plain lines when not a terminal)')
    .argument('<id>')
    .addOption(new Option('--json', 'print each changed status document as one JSON line, then the result'))
    .action(watchCommand);

  program
    .command('status')
    .description('show a migration\'s state, phase, tables, chunks and recent events')
    .argument('<id>')
    .addOption(new Option('--json', 'print the status document as JSON'))
    .action(statusCommand);

  program
    .command('result')
    .description('wait until a migration ends and print its result; exit 0 only if it succeeded')
    .argument('<id>')
    .addOption(new Option('--json', 'print the result document as JSON'))
    .action(resultCommand);

  program
    .command('list')
    .description('list migrations, newest first')
    .addOption(new Option('--state <state>', `only migrations in this state (${MIGRATION_STATES.join(', ')}; any case)`).argParser(migrationState))
    .addOption(new Option('--json', 'print JSON'))
    .action(listCommand);

  program
    .command('validate')
    .description('check a spec; with --connect also run preflight on the workers (nothing is started)')
    .argument('<spec>')
    .option('--connect', 'run preflight through the workers against both databases')
    .addOption(new Option('--json', 'print JSON'))
    .action(validateCommand);
}

/** A document as JSON, or as text for people. */
function printAs<T>(json: boolean | undefined, value: T, text: (value: T) => string): void {
  if (json) printJson(value);
  else process.stdout.write(`${text(value)}\n`);
}

/** After the result is printed: the exit code says whether it succeeded. */
function exitUnlessSucceeded(result: { state: string }): void {
  if (result.state !== 'SUCCEEDED') throw new CliExit('', 1);
}

async function startCommand(specPath: string, opts: StartOptions): Promise<void> {
  const { raw, plan } = loadSpecOrPlanFile(specPath);
  if (plan) return startChange(raw, opts);
  await FerryClient.using(async (client) => {
    const started = await client.start(raw, { id: opts.id, audit: auditOf(opts) });
    if (!opts.json) {
      // What the prepared target tables' own triggers and foreign keys do on Ferry's writes.
      for (const t of started.plan?.tables ?? []) for (const note of t.notes ?? []) process.stderr.write(`note: ${note}\n`);
      if (started.plan?.capture) process.stderr.write(`capture: ${started.plan.capture.mode} (${started.plan.capture.reason})\n`);
    }
    await printStarted(started, opts, { kind: 'migration', follow: (id) => watch(client, id), result: (id) => client.result(id), format: formatResult });
  });
}

/** `ferry start PLAN` for a change plan: preflight first (a refusal exits 2, nothing changed). */
async function startChange(raw: unknown, opts: StartOptions): Promise<void> {
  await FerryClient.using(async (client) => {
    const started = await client.startChange(raw, { id: opts.id, audit: auditOf(opts) });
    if (!opts.json) for (const d of started.preflight?.steps ?? []) if (d.note) process.stderr.write(`note: step ${d.index + 1}: ${d.note}\n`);
    await printStarted(started, opts, { kind: 'change', follow: (id) => watchChange(client, id), result: (id) => client.changeResult(id), format: formatChangeResult });
  });
}

/**
 * What `ferry start` prints: the id (or, with --json, what was started); with --wait, the
 * migration or plan followed to its end (progress on stderr unless --json) and its result.
 */
async function printStarted<S extends { id: string }, R extends { state: string }>(
  started: S,
  opts: StartOptions,
  how: { kind: string; follow: (id: string) => Promise<unknown>; result: (id: string) => Promise<R>; format: (result: R) => string },
): Promise<void> {
  if (!opts.wait) return printAs(opts.json, started, (s) => s.id);
  if (!opts.json) {
    process.stderr.write(`${how.kind} ${started.id} started\n`);
    await how.follow(started.id);
  }
  const result = await how.result(started.id);
  printAs(opts.json, result, how.format);
  exitUnlessSucceeded(result);
}

async function watchCommand(id: string, opts: { json?: boolean }): Promise<void> {
  await FerryClient.using(async (client) => {
    // --json: the result as one more JSON line after the status lines.
    const line = <T>(value: T, text: (value: T) => string) => process.stdout.write(opts.json ? `${JSON.stringify(value)}\n` : `${text(value)}\n`);
    if ((await client.kindOf(id)) === 'change') {
      await watchChange(client, id, { json: opts.json });
      const result = await client.changeResult(id);
      line(result, formatChangeResult);
      return exitUnlessSucceeded(result);
    }
    await watch(client, id, { json: opts.json });
    const result = await client.result(id);
    line(result, formatResult);
    exitUnlessSucceeded(result);
  });
}

async function statusCommand(id: string, opts: { json?: boolean }): Promise<void> {
  await FerryClient.using(async (client) => {
    if ((await client.kindOf(id)) === 'change') return printAs(opts.json, await client.changeStatus(id), formatChangeStatus);
    printAs(opts.json, await client.status(id), formatStatus);
  });
}

async function resultCommand(id: string, opts: { json?: boolean }): Promise<void> {
  await FerryClient.using(async (client) => {
    if ((await client.kindOf(id)) === 'change') {
      const result = await client.changeResult(id);
      printAs(opts.json, result, formatChangeResult);
      return exitUnlessSucceeded(result);
    }
    const result = await client.result(id);
    printAs(opts.json, result, formatResult);
    exitUnlessSucceeded(result);
  });
}

async function listCommand(opts: { state?: string; json?: boolean }): Promise<void> {
  await FerryClient.using(async (client) => {
    const migrations = await client.list({ state: opts.state });
    if (opts.json) return printJson(migrations);
    process.stdout.write(`${formatList(migrations)}\n`);
    const unreadable = migrations.find((m) => m.unreadable);
    if (unreadable) {
      const n = migrations.filter((m) => m.unreadable).length;
      process.stderr.write(`ferry: rows and errors of ${n} migration(s) are encrypted: ${unreadable.unreadable}\n`);
    }
  });
}

async function validateCommand(specPath: string, opts: { connect?: boolean; json?: boolean }): Promise<void> {
  const loaded = loadSpecOrPlanFile(specPath);
  if (loaded.plan) return validateChange(loaded.raw, loaded.plan, opts);
  const { raw, spec } = loadSpecFile(specPath);
  if (!opts.connect) return printAs(opts.json, spec, (s) => `spec ok: ${s.mode} migration ${s.source} → ${s.target}, ${s.tables.length} table(s)`);
  await FerryClient.using(async (client) => {
    printAs(opts.json, await client.preflight(raw, spec.id ?? 'validate'), (plan) => preflightText(spec, plan));
  });
}

/** What preflight planned, a line a table (and its notes), for `ferry validate --connect`. */
function preflightText(spec: Spec, plan: MigrationPlan): string {
  const lines = [`preflight ok: ${spec.source} (${plan.sourceServer}) → ${spec.target} (${plan.targetServer})`];
  if (spec.selection) {
    const excluded = spec.selection.exclude.length ? `, not ${spec.selection.exclude.map((p) => p.text).join(', ')}` : '';
    lines.push(`  ${plan.tables.length + (plan.moreTables ?? 0)} table(s): ${spec.tables.length} named, the rest chosen by ${spec.selection.include.map((i) => i.pattern.text).join(', ')}${excluded}`);
  }
  for (const t of plan.tables) {
    lines.push(
      `  ${displayQualified(t.source)} → ${displayQualified(t.target)}: ~${t.rowsEstimated} rows, ${t.chunks.length} chunk(s), ` +
        `${t.keyColumns.length ? `key (${t.keyColumns.map((k) => k.name).join(', ')})` : 'no key'}${t.copyBy === 'blocks' ? ', read by blocks' : ''}, ` +
        `${t.copyFormat} COPY${t.targetExisted ? ', target exists' : ''}`,
    );
    for (const note of t.notes ?? []) lines.push(`    note: ${note}`);
  }
  if (plan.moreTables) lines.push(`  … and ${plan.moreTables} more table(s), checked like these (a plan lists its first ${plan.tables.length} here)`);
  if (plan.capture) lines.push(`  capture: ${plan.capture.mode} (${plan.capture.reason})`);
  if (plan.objects) lines.push(...objectsText(plan.objects));
  return lines.join('\n');
}

/** What `objects: all` brings besides the tables, for `ferry validate --connect`. */
function objectsText(objects: ObjectsPlan): string[] {
  const kinds = Object.entries(objects.kinds).map(([kind, n]) => `${n} ${kind}`).join(', ');
  return [
    `  objects: schemas ${objects.schemas.join(', ')}${objects.extensions.length ? `, extensions ${objects.extensions.join(', ')}` : ''}; ${kinds || 'no other objects'}`,
    `    ${objects.before} entries before the tables, ${objects.after} after the load` +
      (objects.excludedTables.length ? `; left out (not moved): ${objects.excludedTables.map(displayQualified).join(', ')}` : ''),
  ];
}

/** `ferry validate PLAN` for a change plan; with --connect, its preflight. */
async function validateChange(raw: unknown, plan: ChangePlan, opts: { connect?: boolean; json?: boolean }): Promise<void> {
  if (!opts.connect) return printAs(opts.json, plan, (p) => `plan ok: change on ${p.database}, ${p.steps.length} step(s)`);
  await FerryClient.using(async (client) => {
    const checked = await client.preflightChange(raw, plan.id ?? 'validate');
    if (opts.json) return printJson(checked);
    process.stdout.write(`preflight ok: ${plan.database} (PostgreSQL ${checked.serverVersion}), ${plan.steps.length} step(s)\n`);
    for (const d of checked.steps) if (d.note) process.stdout.write(`  step ${d.index + 1}: ${d.note}\n`);
  });
}

function migrationState(value: string): string {
  const state = value.trim().toUpperCase();
  if (!(MIGRATION_STATES as readonly string[]).includes(state)) {
    throw new InvalidArgumentError(`must be one of ${MIGRATION_STATES.join(', ')} (any case)`);
  }
  return state;
}
