/** `ferry cancel | approve | pause | resume | throttle`: signals to a running migration; `retry`, `unfreeze`, `cleanup` after it ended; `revert` within a rewrite's keepOld. */
import { userInfo } from 'node:os';
import { Command } from 'commander';
import { FerryClient } from '../client';
import { Audit } from '../core/status';
import { nonNegativeInt, positiveInt } from './args';
import { CliExit } from './output';

/** `--reason` and `--actor` (default: the OS user), recorded with the signal in the status and the result. */
export function audited(command: Command): Command {
  return command.option('--reason <text>', 'why: recorded with the signal in the status and the result').option('--actor <name>', 'who sends it (default: the OS user)');
}

export function auditOf(opts: { reason?: string; actor?: string }): Audit {
  let actor = opts.actor;
  if (!actor) {
    try {
      actor = userInfo().username;
    } catch {
      actor = process.env.USER;
    }
  }
  return { actor, reason: opts.reason };
}

async function signal(id: string, fn: (client: FerryClient) => Promise<void>, done: string): Promise<void> {
  await FerryClient.using(fn);
  process.stdout.write(`${done}\n`);
}

export function registerControlCommands(program: Command): void {
  audited(program.command('cancel').description('cancel a migration: running work stops, compensations run, the callback reports CANCELLED').argument('<id>')).action(
    (id: string, opts: Audit) => {
      const audit = auditOf(opts);
      return signal(id, (c) => c.cancel(id, audit.reason, audit.actor), `cancel requested for ${id}`);
    },
  );

  audited(program.command('approve').description('approve the cutover of an online migration waiting for approval').argument('<id>')).action((id: string, opts: Audit) =>
    signal(id, (c) => c.approve(id, auditOf(opts)), `cutover approved for ${id}`),
  );

  audited(program.command('pause').description('pause: chunks and sync finish their current batch, checkpoint and wait').argument('<id>')).action((id: string, opts: Audit) =>
    signal(id, (c) => c.pause(id, auditOf(opts)), `pause requested for ${id}`),
  );

  audited(program.command('resume').description('resume a paused migration from its checkpoints').argument('<id>')).action((id: string, opts: Audit) =>
    signal(id, (c) => c.resume(id, auditOf(opts)), `resume requested for ${id}`),
  );

  program
    .command('retry')
    .description('retry a FAILED migration: a new run resumes from the checkpoints (online: and the change capture) onFailure: keep left')
    .argument('<id>')
    .action(async (id: string) => {
      const { runId } = await FerryClient.using((client) => client.retry(id));
      process.stdout.write(`${id} retried (run ${runId})\n`);
    });

  program
    .command('unfreeze')
    .description('lift the write freeze that an online cutover left on the source (cutover.afterwards: keep-frozen)')
    .argument('<id>')
    .action(async (id: string) => {
      const { unfrozen, pending } = await FerryClient.using((client) => client.unfreeze(id));
      process.stdout.write(unfrozen.length ? `unfrozen: ${unfrozen.join(', ')}\n` : `nothing was frozen by ${id}\n`);
      // Writes pass already; a trigger whose table's lock was taken is left for a later call.
      if (pending?.length) process.stdout.write(`writes pass; not removed yet (a lock was busy; run unfreeze again later): ${pending.join(', ')}\n`);
    });

  program
    .command('cleanup')
    .description('remove what an ended migration or change plan left (onFailure: keep, terminated): capture and freeze on the source and, unless it completed its cutover, what it created on the target; a change plan: its rewrites\' capture and shadows')
    .argument('<id>')
    .action(async (id: string) => {
      const r = await FerryClient.using((client) => client.cleanup(id));
      if (!r.done) {
        process.stdout.write(`${id}: a table's lock is busy; the cleanup goes on in the background as workflow ${r.workflowId}\n`);
        return;
      }
      if (r.change) {
        const shadows = r.dropped?.length ? `dropped ${r.dropped.join(', ')}` : 'no shadow was left';
        const pending = r.pending?.length ? `; not removed yet (a lock was busy; run cleanup again later): ${r.pending.join(', ')}` : '';
        process.stdout.write(`${id}: capture of its rewrites removed; ${shadows}${pending}\n`);
        return;
      }
      const source = r.freezeRemoved ? 'capture, guard and freeze removed from the source' : `capture removed from the source; the freeze stays (ferry unfreeze ${id} lifts it)`;
      const target = r.completed ? "the target's tables stay (it had completed its cutover)" : r.dropped?.length ? `dropped on the target: ${r.dropped.join(', ')}` : 'nothing of it was on the target';
      process.stdout.write(`${id}: ${source}; ${target}\n`);
    });

  audited(
    program
      .command('revert')
      .description("swap a change plan's rewrite step back to the old table, with every write made since the swap (within keepOld)")
      .argument('<id>')
      .option('--step <n>', 'the rewrite step (1-based); needed when the plan swapped more than one', positiveInt),
  ).action(async (id: string, opts: Audit & { step?: number }) => {
    const s = await FerryClient.using((c) => c.revert(id, opts.step, auditOf(opts)));
    if (s.phase !== 'REVERTED') throw new CliExit(`${id} step ${s.step}: the revert failed and the new table stays in place: ${s.failures?.[s.failures.length - 1] ?? 'unknown error'}`, 1);
    process.stdout.write(
      `${id} step ${s.step}: reverted — ${s.revert?.carried ?? 0} logged writes carried back, ${s.revert?.rows ?? 0} rows checked, writers held ${s.revert?.lockedMs ?? 0} ms; ` +
        `the new table stays aside until ${s.until}\n`,
    );
  });

  audited(
    program
      .command('throttle')
      .description('change the copy rate or batch size of a running migration')
      .argument('<id>')
      .option('--rows-per-second <n>', 'cap for the whole migration; 0 removes the cap', nonNegativeInt)
      .option('--batch-rows <n>', 'rows per batch', positiveInt),
  ).action((id: string, opts: { rowsPerSecond?: number; batchRows?: number } & Audit) => {
    if (opts.rowsPerSecond === undefined && opts.batchRows === undefined) {
      throw new CliExit('throttle needs --rows-per-second or --batch-rows', 2);
    }
    const { rowsPerSecond, batchRows } = opts;
    return signal(id, (c) => c.throttle(id, { rowsPerSecond, batchRows }, auditOf(opts)), `throttle sent to ${id}`);
  });
}
