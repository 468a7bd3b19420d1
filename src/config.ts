/** Process configuration from the environment, validated once at the edge (zod). */
import { z } from 'zod';
import { DEFAULT_TASK_QUEUE } from './names';

const envSchema = z.object({
  TEMPORAL_ADDRESS: z.string().min(1).default('127.0.0.1:7233'),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  FERRY_TASK_QUEUE: z.string().min(1).default(DEFAULT_TASK_QUEUE),
});

export interface TemporalConfig {
  address: string;
  namespace: string;
  taskQueue: string;
}

export function temporalConfig(env: NodeJS.ProcessEnv = process.env): TemporalConfig {
  const parsed = envSchema.parse(env);
  return { address: parsed.TEMPORAL_ADDRESS, namespace: parsed.TEMPORAL_NAMESPACE, taskQueue: parsed.FERRY_TASK_QUEUE };
}
