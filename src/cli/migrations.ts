/** `ferry start | status | result | list | validate`. */
import { Command, InvalidArgumentError, Option } from 'commander';
import { FerryClient } from '../client';
import { displayQualified } from '../core/identifiers';
import { loadSpecFile, loadSpecOrPlanFile } from '../spec-file';
import { formatChangeResult, formatChangeStatus, watchChange } from '../view/change-format';
import { MIGRATION_STATES } from '../core/state-machine';
import { formatResult, formatStatus } from '../view/format';
import { CliExit, printJson } from './output';
import { formatList } from '../view/list';
import { watch } from '../view/watch';

export function registerMigrationCommands(program: Command): void {
  program
    .command('start')
    .description('validate SPEC (a migration, or a change plan with kind: change), run preflight on the workers, start it and print its id')
    .argument('<spec>', 'spec file (.yaml, .yml or .json; - for stdin)')
    .option('--id <id>', 'migration id (overrides spec.id)')
    .option('--wait', 'wait for the migration to end; exit 0 only if it succeeded')
    .addOption(new Option('--json', 'print JSON'))
    .action(async (specPath: string, opts: { id?: string; wait?: boolean; json?: boolean }) => {
      const { raw, plan } = loadSpecOrPlanFile(specPath);
      if (plan) return startChange(raw, opts);
      await FerryClient.using(async (client) => {
        const started = await client.start(raw, { id: opts.id });
        // What the prepared target tables' own triggers and foreign keys do on Ferry's writes.
        if (!opts.json) for (const t of started.plan?.tables ?? []) for (const note of t.notes ?? []) process.stderr.write(`note: ${note}\n`);
        if (!opts.json && started.plan?.capture) process.stderr.write(`capture: ${started.plan.capture.mode} (${started.plan.capture.reason})\n`);
        if (!opts.wait) {
          if (opts.json) printJson(started);
          else process.stdout.write(`${started.id}\n`);
          return;
        }
        if (!opts.json) process.stderr.write(`migration ${started.id} started\n`);
        if (!opts.json) await watch(client, started.id);
        const result = await client.result(started.id);
        if (opts.json) printJson(result);
        else process.stdout.write(`${formatResult(result)}\n`);
        if (result.state !== 'SUCCEEDED') throw new CliExit('', 1);
      });
    });

  program
    .command('watch')
    .description('follow a migration until it ends: progress bars per table (plain lines when not a terminal)')
    .argument('<id>')
    .addOption(new Option('--json', 'print each changed status document as one JSON line, then the result'))
    .action(async (id: string, opts: { json?: boolean }) => {
      await FerryClient.using(async (client) => {
        if ((await client.kindOf(id)) === 'change') {
          await watchChange(client, id, { json: opts.json });
          const result = await client.changeResult(id);
          process.stdout.write(opts.json ? `${JSON.stringify(result)}\n` : `${formatChangeResult(result)}\n`);
          if (result.state !== 'SUCCEEDED') throw new CliExit('', 1);
          return;
        }
        await watch(client, id, { json: opts.json });
        const result = await client.result(id);
        if (opts.json) process.stdout.write(`${JSON.stringify(result)}\n`);
        else process.stdout.write(`${formatResult(result)}\n`);
        if (result.state !== 'SUCCEEDED') throw new CliExit('', 1);
      });
    });

  program
    .command('status')
    .description('show a migration\'s state, phase, tables, chunks and recent events')
    .argument('<id>')
    .addOption(new Option('--json', 'print the status document as JSON'))
    .action(async (id: string, opts: { json?: boolean }) => {
      await FerryClient.using(async (client) => {
        if ((await client.kindOf(id)) === 'change') {
          const status = await client.changeStatus(id);
          if (opts.json) printJson(status);
          else process.stdout.write(`${formatChangeStatus(status)}\n`);
          return;
        }
        const status = await client.status(id);
        if (opts.json) printJson(status);
        else process.stdout.write(`${formatStatus(status)}\n`);
      });
    });

  program
    .command('result')
    .description('wait until a migration ends and print its result; exit 0 only if it succeeded')
    .argument('<id>')
    .addOption(new Option('--json', 'print the result document as JSON'))
    .action(async (id: string, opts: { json?: boolean }) => {
      await FerryClient.using(async (client) => {
        if ((await client.kindOf(id)) === 'change') {
          const result = await client.changeResult(id);
          if (opts.json) printJson(result);
          else process.stdout.write(`${formatChangeResult(result)}\n`);
          if (result.state !== 'SUCCEEDED') throw new CliExit('', 1);
          return;
        }
        const result = await client.result(id);
        if (opts.json) printJson(result);
        else process.stdout.write(`${formatResult(result)}\n`);
        if (result.state !== 'SUCCEEDED') throw new CliExit('', 1);
      });
    });

  program
    .command('list')
    .description('list migrations, newest first')
    .addOption(new Option('--state <state>', `only migrations in this state (${MIGRATION_STATES.join(', ')}; any case)`).argParser(migrationState))
    .addOption(new Option('--json', 'print JSON'))
    .action(async (opts: { state?: string; json?: boolean }) => {
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
    });

  program
    .command('validate')
    .description('check a spec; with --connect also run preflight on the workers (nothing is started)')
    .argument('<spec>')
    .option('--connect', 'run preflight through the workers against both databases')
    .addOption(new Option('--json', 'print JSON'))
    .action(async (specPath: string, opts: { connect?: boolean; json?: boolean }) => {
      const loaded = loadSpecOrPlanFile(specPath);
      if (loaded.plan) {
        const plan = loaded.plan;
        if (!opts.connect) {
          if (opts.json) return printJson(plan);
          process.stdout.write(`plan ok: change on ${plan.database}, ${plan.steps.length} step(s)\n`);
          return;
        }
        await FerryClient.using(async (client) => {
          const checked = await client.preflightChange(loaded.raw, plan.id ?? 'validate');
          if (opts.json) return printJson(checked);
          process.stdout.write(`preflight ok: ${plan.database} (PostgreSQL ${checked.serverVersion}), ${plan.steps.length} step(s)\n`);
          for (const d of checked.steps) if (d.note) process.stdout.write(`  step ${d.index + 1}: ${d.note}\n`);
        });
        return;
      }
      const { raw, spec } = loadSpecFile(specPath);
      if (!opts.connect) {
        if (opts.json) return printJson(spec);
        process.stdout.write(`spec ok: ${spec.mode} migration ${spec.source} → ${spec.target}, ${spec.tables.length} table(s)\n`);
        return;
      }
      await FerryClient.using(async (client) => {
        const plan = await client.preflight(raw, spec.id ?? 'validate');
        if (opts.json) return printJson(plan);
        process.stdout.write(`preflight ok: ${spec.source} (${plan.sourceServer}) → ${spec.target} (${plan.targetServer})\n`);
        for (const t of plan.tables) {
          process.stdout.write(
            `  ${displayQualified(t.source)} → ${displayQualified(t.target)}: ~${t.rowsEstimated} rows, ${t.chunks.length} chunk(s), key (${t.keyColumns.map((k) => k.name).join(', ')}), ${t.copyFormat} COPY${t.targetExisted ? ', target exists' : ''}\n`,
          );
          for (const note of t.notes ?? []) process.stdout.write(`    note: ${note}\n`);
        }
        if (plan.capture) process.stdout.write(`  capture: ${plan.capture.mode} (${plan.capture.reason})\n`);
      });
    });
}

function migrationState(value: string): string {
  const state = value.trim().toUpperCase();
  if (!(MIGRATION_STATES as readonly string[]).includes(state)) {
    throw new InvalidArgumentError(`must be one of ${MIGRATION_STATES.join(', ')} (any case)`);
  }
  return state;
}

/** `ferry start PLAN` for a change plan: preflight first (a refusal exits 2, nothing changed). */
async function startChange(raw: unknown, opts: { id?: string; wait?: boolean; json?: boolean }): Promise<void> {
  await FerryClient.using(async (client) => {
    const started = await client.startChange(raw, { id: opts.id });
    if (!opts.json) for (const d of started.preflight?.steps ?? []) if (d.note) process.stderr.write(`note: step ${d.index + 1}: ${d.note}\n`);
    if (!opts.wait) {
      if (opts.json) printJson(started);
      else process.stdout.write(`${started.id}\n`);
      return;
    }
    if (!opts.json) {
      process.stderr.write(`change ${started.id} started\n`);
      await watchChange(client, started.id);
    }
    const result = await client.changeResult(started.id);
    if (opts.json) printJson(result);
    else process.stdout.write(`${formatChangeResult(result)}\n`);
    if (result.state !== 'SUCCEEDED') throw new CliExit('', 1);
  });
}
