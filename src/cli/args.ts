/** Argument parsers shared by the CLI's commands. */
import { InvalidArgumentError } from 'commander';
import { parseDuration } from '../core/duration';

export function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

export function nonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('must be a whole number, 0 or more');
  return n;
}

export function duration(value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined) throw new InvalidArgumentError('must be a duration such as 30s, 5m or 1h');
  return ms;
}

/** An http(s) URL, as the Web UI and the temporal CLI take a codec endpoint. */
export function httpUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('must be an http(s) URL, e.g. http://127.0.0.1:8888');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidArgumentError('must be an http(s) URL, e.g. http://127.0.0.1:8888');
  return value.replace(/\/+$/, '');
}
