/**
 * A field table (path, type, default, meaning) from a zod schema's JSON Schema, for the spec and
 * change-plan references in docs/reference/: the documentation cannot drift from what the CLI
 * accepts (`npm run docs` writes them; test/unit/docs.test.ts keeps them current).
 */
export interface JsonSchema {
  type?: string;
  enum?: unknown[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  const?: unknown;
}

function typeText(s: JsonSchema): string {
  if (s.enum) return s.enum.map((v) => `\`${String(v)}\``).join(' \\| ');
  if (s.const !== undefined) return `\`${String(s.const)}\``;
  // Alternative objects told apart by a key each (a change plan's step kinds).
  const kinds = s.anyOf?.map((a) => (a.type === 'object' ? a.required?.[0] : undefined));
  if (kinds && kinds.length > 1 && kinds.every(Boolean)) return `object, one of ${kinds.map((k) => `\`${k}\``).join(', ')}`;
  if (s.anyOf) return s.anyOf.map(typeText).join(' or ');
  if (s.type === 'integer' && s.minimum !== undefined) return `integer ${s.minimum.toLocaleString('en-US')}–${(s.maximum ?? Infinity).toLocaleString('en-US')}`;
  if (s.type === 'array') return `list (${s.minItems ?? 0}–${s.maxItems ?? '∞'}) of ${s.items ? typeText(s.items) : 'items'}`;
  return s.type ?? 'JSON';
}

/** `required`: the word for a required field ('required', or 'required in its kind' among alternatives). */
function row(path: string, s: JsonSchema, required: string | undefined): string {
  const def = s.default !== undefined ? `\`${JSON.stringify(s.default)}\`` : required ?? '—';
  const meaning = (s.description ?? '').replace(/\|/g, '\\|').replace(/</g, '&lt;');
  return `| \`${path}\` | ${typeText(s)} | ${def} | ${meaning} |`;
}

/** The object shapes a list's items may take (a change plan's steps: one per step kind). */
function itemObjects(s: JsonSchema): JsonSchema[] {
  // A list, or a list among the field's alternatives (tables: all, or a list).
  const items = s.items ?? s.anyOf?.find((a) => a.type === 'array')?.items;
  if (!items) return [];
  if (items.properties) return [items];
  return (items.anyOf ?? []).filter((a) => a.properties);
}

/** Every field at every depth, one row each; a path met again (a field every step kind has) once. */
export function fieldTable(schema: JsonSchema): string {
  const lines = ['| field | type | default | meaning |', '| --- | --- | --- | --- |'];
  const seen = new Set<string>();
  const walk = (props: Record<string, JsonSchema>, required: string[], prefix: string, word = 'required') => {
    for (const [name, s] of Object.entries(props)) {
      const path = `${prefix}${name}`;
      if (seen.has(path)) continue;
      seen.add(path);
      lines.push(row(path, s, required.includes(name) ? word : undefined));
      if (s.properties) walk(s.properties, s.required ?? [], `${path}.`);
      const items = itemObjects(s);
      for (const item of items) walk(item.properties!, item.required ?? [], `${path}[].`, items.length > 1 ? 'required in its kind' : 'required');
    }
  };
  walk(schema.properties ?? {}, schema.required ?? [], '');
  return lines.join('\n');
}
