/** Process configuration from the environment, validated once at the edge (zod). */
import { ConfigError } from './core/errors';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { DEFAULT_TASK_QUEUE } from './core/names';

const envSchema = z.object({
  TEMPORAL_ADDRESS: z.string().min(1).default('127.0.0.1:7233'),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  FERRY_TASK_QUEUE: z.string().min(1).default(DEFAULT_TASK_QUEUE),
  TEMPORAL_TLS: z.enum(['true', 'false', '1', '0', '']).optional(),
  TEMPORAL_TLS_CA: z.string().optional(),
  TEMPORAL_TLS_CERT: z.string().optional(),
  TEMPORAL_TLS_KEY: z.string().optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().optional(),
  TEMPORAL_API_KEY: z.string().optional(),
});

/** TLS towards the Temporal frontend, in the SDK's shape (certificates read from the given paths). */
export interface TemporalTls {
  serverNameOverride?: string;
  serverRootCACertificate?: Buffer;
  clientCertPair?: { crt: Buffer; key: Buffer };
}

export interface TemporalConfig {
  address: string;
  namespace: string;
  taskQueue: string;
  /** Absent: plaintext (the dev server). */
  tls?: TemporalTls;
  /** Temporal Cloud API key; implies TLS. */
  apiKey?: string;
}

export { ConfigError };

function readPem(variable: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new ConfigError(`${variable}=${path}: cannot read it (${(err as Error).message}); point it at a PEM file`);
  }
}

export function temporalConfig(env: NodeJS.ProcessEnv = process.env): TemporalConfig {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ConfigError(`${issue.path.join('.')}: ${issue.message}`);
  }
  const e = parsed.data;
  const config: TemporalConfig = { address: e.TEMPORAL_ADDRESS, namespace: e.TEMPORAL_NAMESPACE, taskQueue: e.FERRY_TASK_QUEUE };
  if (Boolean(e.TEMPORAL_TLS_CERT) !== Boolean(e.TEMPORAL_TLS_KEY)) {
    throw new ConfigError('TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together (the client certificate and its key for mTLS): set both or neither');
  }
  const wantsTls = e.TEMPORAL_TLS === 'true' || e.TEMPORAL_TLS === '1' || e.TEMPORAL_TLS_CA || e.TEMPORAL_TLS_CERT || e.TEMPORAL_API_KEY;
  if (wantsTls) {
    const tls: TemporalTls = {};
    if (e.TEMPORAL_TLS_SERVER_NAME) tls.serverNameOverride = e.TEMPORAL_TLS_SERVER_NAME;
    if (e.TEMPORAL_TLS_CA) tls.serverRootCACertificate = readPem('TEMPORAL_TLS_CA', e.TEMPORAL_TLS_CA);
    if (e.TEMPORAL_TLS_CERT && e.TEMPORAL_TLS_KEY) {
      tls.clientCertPair = { crt: readPem('TEMPORAL_TLS_CERT', e.TEMPORAL_TLS_CERT), key: readPem('TEMPORAL_TLS_KEY', e.TEMPORAL_TLS_KEY) };
    }
    config.tls = tls;
  }
  if (e.TEMPORAL_API_KEY) config.apiKey = e.TEMPORAL_API_KEY;
  return config;
}

/** Connection options for the SDK (client and worker alike): address, TLS, API key. */
export function connectionOptions(config: Pick<TemporalConfig, 'address' | 'tls' | 'apiKey'>): {
  address: string;
  tls?: TemporalTls;
  apiKey?: string;
} {
  return { address: config.address, ...(config.tls ? { tls: config.tls } : {}), ...(config.apiKey ? { apiKey: config.apiKey } : {}) };
}

/**
 * What a worker process's environment should hold when it starts (the image sets it; Ferry's own
 * tests and benches start workers with it). glibc gives threads that allocate at once malloc arenas
 * of their own, up to eight per core, and each arena keeps what was freed in it for itself: with the
 * SDK's native threads, V8's helpers and libuv's pool, a worker over 500 small tables peaked at
 * 270–283 MB with the default and 234–238 MB with two arenas, in the same time. It has to be in
 * the environment before the process starts: glibc reads it once.
 */
export const WORKER_PROCESS_ENV = { MALLOC_ARENA_MAX: '2' } as const;
