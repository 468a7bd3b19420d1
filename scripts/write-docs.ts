/**
 * `npm run docs` (also `npm run schema`): regenerates what is generated from the code — the JSON
 * Schemas in schema/ (for Go, Python and editors) from the zod schemas, and the references in
 * docs/reference/ (spec and change-plan fields, the CLI's help, events, failures and exit codes).
 * test/unit/docs.test.ts fails while any of them is stale.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { changePlanJsonSchema } from '../src/core/change-plan';
import { specJsonSchema } from '../src/core/spec';
import { referenceDocs } from '../src/dev/docs/reference';

const root = join(__dirname, '..');
const files = new Map<string, string>([
  ['schema/ferry-spec.schema.json', `${JSON.stringify(specJsonSchema(), null, 2)}\n`],
  ['schema/ferry-change.schema.json', `${JSON.stringify(changePlanJsonSchema(), null, 2)}\n`],
  ...referenceDocs(),
]);
for (const [path, text] of files) {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), text);
  process.stdout.write(`wrote ${path}\n`);
}
