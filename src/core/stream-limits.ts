/**
 * How much the event streams keep, from the environment of the workers: FERRY_EVENTS_MAX_AGE
 * (a duration, 7d), FERRY_EVENTS_MAX_BYTES (bytes, or with K, M, G or T: binary units; none),
 * FERRY_EVENTS_MAX_MESSAGES (none) and FERRY_EVENTS_REPLICAS (1 to 5, 1). Checked when a worker
 * starts: a worker with a bad one refuses to start, naming it. Pure module.
 */
import { ConfigError } from './errors';
import { parseDuration } from './duration';

export interface StreamLimits {
  maxAgeMs: number;
  /** -1: no limit (JetStream's own spelling). */
  maxBytes: number;
  maxMessages: number;
  replicas: number;
  /** The variables that were set: applied to a stream that exists already, not only to a new one. */
  given: (keyof Omit<StreamLimits, 'given'>)[];
}

const DEFAULT_MAX_AGE = '7d';
const SIZE = /^(\d+)\s*([KMGT]?)i?B?$/i;
const SIZE_UNIT: Record<string, number> = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 };

export function streamLimits(env: NodeJS.ProcessEnv): StreamLimits {
  const given: StreamLimits['given'] = [];
  const set = (name: string, field: StreamLimits['given'][number]) => {
    const value = env[name]?.trim();
    if (value) given.push(field);
    return value || undefined;
  };
  const age = set('FERRY_EVENTS_MAX_AGE', 'maxAgeMs') ?? DEFAULT_MAX_AGE;
  const maxAgeMs = parseDuration(age);
  if (!maxAgeMs) throw new ConfigError(`FERRY_EVENTS_MAX_AGE=${age}: not a duration; write how long the stream keeps events, such as 7d or 12h`);
  const bytes = set('FERRY_EVENTS_MAX_BYTES', 'maxBytes');
  const size = bytes === undefined ? undefined : SIZE.exec(bytes);
  if (bytes !== undefined && (!size || Number(size[1]) === 0)) throw new ConfigError(`FERRY_EVENTS_MAX_BYTES=${bytes}: not a size; write bytes, or a number with K, M, G or T (such as 10G)`);
  const messages = set('FERRY_EVENTS_MAX_MESSAGES', 'maxMessages');
  if (messages !== undefined && !/^[1-9]\d*$/.test(messages)) throw new ConfigError(`FERRY_EVENTS_MAX_MESSAGES=${messages}: not a whole number of messages above 0`);
  const replicas = set('FERRY_EVENTS_REPLICAS', 'replicas') ?? '1';
  if (!/^[1-5]$/.test(replicas)) throw new ConfigError(`FERRY_EVENTS_REPLICAS=${replicas}: JetStream keeps 1 to 5 replicas of a stream`);
  return {
    maxAgeMs,
    maxBytes: size ? Number(size[1]) * SIZE_UNIT[size[2].toUpperCase()] : -1,
    maxMessages: messages === undefined ? -1 : Number(messages),
    replicas: Number(replicas),
    given,
  };
}
