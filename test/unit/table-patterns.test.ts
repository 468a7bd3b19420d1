/**
 * Choosing tables by pattern (src/core/table-patterns.ts and the spec's tables:/exclude:): what a
 * pattern means, what it never chooses, how a named entry and exclude: bear on it, and the
 * refusals, each naming its field.
 */
import { parseSpec } from '../../src/core/spec';
import { chooseSchemas, chooseTables, isPattern, parseTablePattern, TablePattern } from '../../src/core/table-patterns';
import { specProblems } from '../helpers/spec-problems';

const problems = specProblems;

const pattern = (text: string) => parseTablePattern(text) as TablePattern;
const t = (schema: string, name: string) => ({ schema, name });
const names = (chosen: { table: { schema: string; name: string } }[]) => chosen.map((c) => `${c.table.schema}.${c.table.name}`);

const SOURCE = [
  t('_ferry', 'checkpoints'),
  t('_ferry_change', 'steps'),
  t('billing', 'invoice_2024'),
  t('billing', 'invoice_2025'),
  t('billing', 'invoices'),
  t('information_schema', 'sql_parts'),
  t('pg_catalog', 'pg_class'),
  t('public', 'orders'),
  t('public', 'users'),
  t('Sales*', 'orders'),
  t('tenant_1', 'orders'),
  t('tenant_2', 'orders'),
];

describe('table patterns', () => {
  it('tells a pattern from a name: a * or ? outside quotes, or all', () => {
    expect(['public.*', '*.*', 'billing.invoice_?', 'all', '"Sales".*'].map(isPattern)).toEqual([true, true, true, true, true]);
    expect(['public.orders', '"Sales*".orders', 'app."Order Lines"'].map(isPattern)).toEqual([false, false, false]);
  });

  it('matches schema and table each as a glob, folding unquoted parts and taking quoted ones literally', () => {
    expect(names(chooseTables(SOURCE, [pattern('public.*')], []))).toEqual(['public.orders', 'public.users']);
    expect(names(chooseTables(SOURCE, [pattern('BILLING.invoice_20??')], []))).toEqual(['billing.invoice_2024', 'billing.invoice_2025']);
    expect(names(chooseTables(SOURCE, [pattern('tenant_*.orders')], []))).toEqual(['tenant_1.orders', 'tenant_2.orders']);
    expect(names(chooseTables(SOURCE, [pattern('"Sales*".*')], []))).toEqual(['Sales*.orders']);
    // A dot in a glob is a dot, not any character.
    expect(names(chooseTables([t('a', 'b_c'), t('a', 'bxc')], [pattern('a.b_c')], []))).toEqual(['a.b_c']);
  });

  it("never chooses PostgreSQL's schemas or Ferry's own, even with all", () => {
    expect(names(chooseTables(SOURCE, [pattern('all')], []))).toEqual([
      'billing.invoice_2024',
      'billing.invoice_2025',
      'billing.invoices',
      'public.orders',
      'public.users',
      'Sales*.orders',
      'tenant_1.orders',
      'tenant_2.orders',
    ]);
    expect(names(chooseTables(SOURCE, [pattern('_ferry*.*'), pattern('pg_*.*'), pattern('information_schema.*')], []))).toEqual([]);
  });

  it('chooses a schema whole only where a pattern takes every table of it, and never a reserved one', () => {
    const schemas = ['app', 'billing', 'reporting', 'tenant_1', 'tenant_2', 'pg_catalog', '_ferry', 'information_schema'];
    expect(chooseSchemas(schemas, [pattern('all')], [])).toEqual(['app', 'billing', 'reporting', 'tenant_1', 'tenant_2']);
    expect(chooseSchemas(schemas, [pattern('tenant_*.*'), pattern('billing.invoice_*')], [])).toEqual(['tenant_1', 'tenant_2']);
    expect(chooseSchemas(schemas, [pattern('*.*')], [pattern('tenant_2.*'), pattern('app.audit_*')])).toEqual(['app', 'billing', 'reporting', 'tenant_1']);
  });

  it('takes out what exclude: matches, and says which pattern chose each table', () => {
    const chosen = chooseTables(SOURCE, [pattern('billing.*'), pattern('*.orders')], [pattern('billing.invoice_2024'), pattern('tenant_2.*')]);
    expect(chosen.map((c) => `${c.table.schema}.${c.table.name} by ${c.pattern.text}`)).toEqual([
      'billing.invoice_2025 by billing.*',
      'billing.invoices by billing.*',
      'public.orders by *.orders',
      'Sales*.orders by *.orders',
      'tenant_1.orders by *.orders',
    ]);
  });

  it('puts named tables in the spec first, with their fields, and keeps the patterns for preflight', () => {
    const spec = parseSpec({ source: 'a', target: 'b', tables: ['billing.*', { name: 'public.orders', target: 'archive.orders', chunks: 4 }], exclude: ['billing.invoice_2024'] });
    expect(spec.tables).toEqual([{ source: t('public', 'orders'), target: t('archive', 'orders'), chunks: 4, field: 'tables[1]' }]);
    expect(spec.selection).toEqual({
      include: [{ field: 'tables[0]', pattern: { text: 'billing.*', schema: { text: 'billing', glob: false }, name: { text: '*', glob: true } } }],
      exclude: [{ text: 'billing.invoice_2024', schema: { text: 'billing', glob: false }, name: { text: 'invoice_2024', glob: false } }],
    });
    expect(parseSpec({ source: 'a', target: 'b', tables: 'all' }).selection?.include).toEqual([{ field: 'tables', pattern: pattern('all') }]);
    // A spec without patterns is as it was: no selection, no fields.
    expect(parseSpec({ source: 'a', target: 'b', tables: ['public.orders'] })).not.toHaveProperty('selection');
    expect(parseSpec({ source: 'a', target: 'b', tables: ['public.orders'] }).tables[0]).not.toHaveProperty('field');
  });

  it('refuses a bad pattern, a pattern as an entry name, exclude: without a pattern, and any other word for all, naming the field', () => {
    expect(problems({ source: 'a', target: 'b', tables: ['public*'] })).toEqual([
      'tables[0]: must be a pattern schema.table, each part a name or a glob with * and ? (public.*, billing.invoice_*, *.*), or all',
    ]);
    expect(problems({ source: 'a', target: 'b', tables: ['public.*.x'] })[0]).toMatch(/^tables\[0\]: must be a pattern schema\.table/);
    expect(problems({ source: 'a', target: 'b', tables: [{ name: 'public.*' }] })[0]).toMatch(/^tables\[0\]\.name: must be schema\.table/);
    expect(problems({ source: 'a', target: 'b', tables: ['public.orders'], exclude: ['public.x*'] })).toEqual([
      'exclude: takes tables out of what tables: patterns choose, and tables: names no pattern; remove exclude, or choose tables with a pattern (public.*, all)',
    ]);
    expect(problems({ source: 'a', target: 'b', tables: 'everything' })[0]).toMatch(/^tables: /);
    expect(problems({ source: 'a', target: 'b', tables: ['public.*'], exclude: ['x'] })[0]).toMatch(/^exclude\[0\]: must be a pattern/);
  });
});
