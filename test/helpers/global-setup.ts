/**
 * Once per `jest` run: make sure PostgreSQL answers, the temporal binary exists and the
 * workflow bundle is built (cached by content hash, so workers and tests skip webpack).
 */
import { DEFAULT_TEST_PG, ensurePostgres } from '../../src/postgres';
import { ensureTemporalBinary } from '../../src/temporal/binary';
import { workflowBundlePath } from '../../src/temporal/bundle';

export default async function globalSetup(): Promise<void> {
  process.env.FERRY_TEST_PG ??= DEFAULT_TEST_PG;
  await ensurePostgres(process.env.FERRY_TEST_PG);
  const binary = await ensureTemporalBinary();
  if (binary) process.env.FERRY_TEMPORAL_BIN = binary;
  process.env.FERRY_WORKFLOW_BUNDLE = workflowBundlePath();
}
