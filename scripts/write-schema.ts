/**
 * Regenerates schema/ferry-spec.schema.json and schema/ferry-change.schema.json from the zod
 * schemas (for Go, Python and editors) and
 * the README's spec reference table from that schema.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { changePlanJsonSchema } from '../src/core/change-plan';
import { specJsonSchema } from '../src/core/spec';
import { withSpecReference } from '../src/spec-reference';

const root = join(__dirname, '..');
const schema = specJsonSchema();
const file = join(root, 'schema', 'ferry-spec.schema.json');
writeFileSync(file, `${JSON.stringify(schema, null, 2)}\n`);
process.stdout.write(`wrote ${file}\n`);
const changeFile = join(root, 'schema', 'ferry-change.schema.json');
writeFileSync(changeFile, `${JSON.stringify(changePlanJsonSchema(), null, 2)}\n`);
process.stdout.write(`wrote ${changeFile}\n`);
const readme = join(root, 'README.md');
writeFileSync(readme, withSpecReference(readFileSync(readme, 'utf8'), JSON.parse(JSON.stringify(schema))));
process.stdout.write(`updated the spec reference in ${readme}\n`);
