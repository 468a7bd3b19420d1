/**
 * Once per `jest` run: make sure PostgreSQL answers and the temporal binary exists, and bundle
 * the workflows once (each Worker.create({ workflowsPath }) would run webpack again).
 */
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';
import { DEFAULT_TEST_PG, ensurePostgres } from '../../src/postgres';
import { ensureTemporalBinary } from '../../src/temporal/binary';
import { WORKFLOWS_PATH } from '../../src/worker';

export default async function globalSetup(): Promise<void> {
  process.env.FERRY_TEST_PG ??= DEFAULT_TEST_PG;
  await ensurePostgres(process.env.FERRY_TEST_PG);
  const binary = await ensureTemporalBinary();
  if (binary) process.env.FERRY_TEMPORAL_BIN = binary;
  const { code } = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: new DefaultLogger('WARN') });
  const file = join(tmpdir(), `ferry-test-workflows-${process.pid}.js`);
  writeFileSync(file, code);
  process.env.FERRY_WORKFLOW_BUNDLE = file;
}
