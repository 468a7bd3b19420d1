/**
 * The `ferry` command line (docs/reference/cli.md, generated from it). Exit codes: 0 success, 2 invalid input (nothing
 * started), 1 the migration failed or was cancelled (or an operational error).
 */
import { Command } from 'commander';
import { registerCodecCommand } from './codec';
import { registerControlCommands } from './control';
import { registerEventsCommand } from './events';
import { registerMigrationCommands } from './migrations';
import { registerProcessCommands } from './processes';
import { exitCodeFor, printError } from './output';

export function buildProgram(): Command {
  const program = new Command('ferry')
    .description('Durable PostgreSQL migrations on Temporal')
    .showHelpAfterError()
    .exitOverride();
  registerProcessCommands(program);
  registerMigrationCommands(program);
  registerControlCommands(program);
  registerEventsCommand(program);
  registerCodecCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const commanderCode = typeof code === 'string' && code.startsWith('commander.') ? code : undefined;
    if (commanderCode === 'commander.helpDisplayed' || commanderCode === 'commander.version' || commanderCode === 'commander.help') return 0;
    if (commanderCode) return 2;
    printError(err);
    return exitCodeFor(err);
  }
}

if (require.main === module) {
  void main(process.argv).then((code) => {
    process.exitCode = code;
  });
}
