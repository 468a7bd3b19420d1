/** Structured JSON logs (pino) on stderr; every line can carry migration, table, chunk, attempt. */
import pino, { Logger } from 'pino';

export type { Logger };

export function createLogger(options: { level?: string; name?: string } = {}): Logger {
  return pino(
    {
      name: options.name ?? 'ferry',
      level: options.level ?? process.env.FERRY_LOG_LEVEL ?? 'info',
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    pino.destination(2),
  );
}

/** A logger that drops everything, for tests and one-shot CLI commands. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
