/**
 * The benches' one way to run a command: its output kept (stdout and stderr together in `out`,
 * stdout alone too), its end taken from 'close' — not 'exit', which can come before the pipes
 * are read to the end, so a summary printed last (pgbench's, `ferry start --json`'s) could be
 * missing from `out`.
 */
import { ChildProcess, spawn } from 'node:child_process';

export interface ProcessResult {
  code: number | null;
  /** stdout and stderr as they came, the last `keep` characters where a limit is given. */
  out: string;
  stdout: string;
}

export interface RunningProcess {
  child: ChildProcess;
  done: Promise<ProcessResult>;
}

export interface ProcessOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Keep only the last this many characters of `out` (a process that runs for long). */
  keep?: number;
  /**
   * In a process group of its own: pgcopydb ends a failed run by killing every process of its
   * group ("Terminating all processes in our process group"), which would be the bench's.
   */
  ownGroup?: boolean;
}

/** Starts a command; `done` settles once it has ended and its output is read. */
export function startProcess(command: string, argv: string[], options: ProcessOptions = {}): RunningProcess {
  const child = spawn(command, argv, { env: options.env ?? process.env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: options.ownGroup === true });
  const limit = (text: string) => (options.keep === undefined ? text : text.slice(-options.keep));
  let out = '';
  let stdout = '';
  child.stdout.on('data', (d) => {
    out = limit(out + d);
    stdout = limit(stdout + d);
  });
  child.stderr.on('data', (d) => (out = limit(out + d)));
  const done = new Promise<ProcessResult>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out, stdout }));
  });
  return { child, done };
}

/** Runs a command to its end. */
export function runProcess(command: string, argv: string[], options: ProcessOptions = {}): Promise<ProcessResult> {
  return startProcess(command, argv, options).done;
}
