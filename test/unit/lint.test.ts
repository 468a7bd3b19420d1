import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');

/** Lints `code` as if it were `file`, with the project's own configuration (eslint's CLI). */
async function lint(code: string, file: string): Promise<string[]> {
  const run = spawnSync(join(root, 'node_modules', '.bin', 'eslint'), ['--format', 'json', '--stdin', '--stdin-filename', file], {
    cwd: root,
    input: code,
    encoding: 'utf8',
  });
  const [result] = JSON.parse(run.stdout) as { messages: { ruleId: string; message: string }[] }[];
  return result.messages.map((m) => `${m.ruleId}: ${m.message}`);
}

describe('the lint rule that keeps workflows deterministic', () => {
  it('refuses Node modules and drivers in workflows/', async () => {
    expect((await lint("import { readFileSync } from 'node:fs';\nexport const x = readFileSync;\n", 'workflows/bad.ts')).join('\n')).toMatch(
      /no Node modules/,
    );
    expect((await lint("import { Client } from 'pg';\nexport const x = Client;\n", 'workflows/bad.ts')).join('\n')).toMatch(/belong in activities/);
  });

  it('allows activities as types only', async () => {
    expect(await lint("import type { Activities } from '../activities';\nexport type A = Activities;\n", 'workflows/ok.ts')).toEqual([]);
    expect((await lint("import { createActivities } from '../activities';\nexport const a = createActivities;\n", 'workflows/bad.ts')).join('\n')).toMatch(
      /types only/,
    );
     // A family folder's workflows are a level deeper, the change plan's operations two.
    expect(await lint("import type { Activities } from '../../activities';\nexport type A = Activities;\n", 'workflows/change/ok.ts')).toEqual([]);
    expect(
      (await lint("import { createActivities } from '../../activities';\nexport const a = createActivities;\n", 'workflows/migration/bad.ts')).join('\n'),
    ).toMatch(/types only/);
    expect(
      (await lint("import { createCopyChunk } from '../../../activities/copy-chunk';\nexport const a = createCopyChunk;\n", 'workflows/change/ops/bad.ts')).join('\n'),
    ).toMatch(/types only/);
    expect((await lint("import { Pool } from '../../../src/db/connections';\nexport const p = Pool;\n", 'workflows/change/ops/bad.ts')).join('\n')).toMatch(
      /may import only src\/core/,
    );
  });

  it('holds src/core, the pure modules that workflows import, to the same rule', async () => {
    expect((await lint("import { Pool } from 'pg';\nexport const p = Pool;\n", 'src/core/plan.ts')).join('\n')).toMatch(/belong in activities/);
    expect((await lint("import { sqlState } from '../db/errors';\nexport const s = sqlState;\n", 'src/core/new.ts')).join('\n')).toMatch(/src\/core must not import/);
  });

  it('lets workflows import src/core and nothing else of src', async () => {
    expect(await lint("import { parseSpec } from '../src/core/spec';\nexport const p = parseSpec;\n", 'workflows/ok.ts')).toEqual([]);
    expect((await lint("import { inTransaction } from '../src/db/connections';\nexport const t = inTransaction;\n", 'workflows/bad.ts')).join('\n')).toMatch(
      /may import only src\/core/,
    );
    expect((await lint("import { FerryClient } from '../../src/client';\nexport const c = FerryClient;\n", 'workflows/legacy/bad.ts')).join('\n')).toMatch(
      /may import only src\/core/,
    );
  });
});
