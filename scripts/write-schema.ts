/** Regenerates schema/ferry-spec.schema.json from the zod spec (for Go, Python and editors). */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { specJsonSchema } from '../src/spec';

const file = join(__dirname, '..', 'schema', 'ferry-spec.schema.json');
writeFileSync(file, `${JSON.stringify(specJsonSchema(), null, 2)}\n`);
process.stdout.write(`wrote ${file}\n`);
