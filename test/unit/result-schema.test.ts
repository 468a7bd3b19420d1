/**
 * The result document, the change plan's and `ferry list`'s entries against the published JSON
 * Schema (schema/ferry-result.schema.json), and the one naming rule inside each: the callback
 * contract's snake_case fields, camelCase for everything else.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv2020 from 'ajv/dist/2020';
import type { MigrationSummary } from '../../src/client';
import { changeResultDocument, ChangeStatusDocument } from '../../src/core/change-status';
import { currentResultNames, RESULT_TABLES_LISTED, resultDocument, StatusDocument } from '../../src/core/status';

const schema = JSON.parse(readFileSync(join(__dirname, '..', '..', 'schema', 'ferry-result.schema.json'), 'utf8'));
const CONTRACT = ['task_id', 'state', 'start_time', 'end_time', 'duration', 'duration_ms', 'error', 'metadata'];
const camel = /^[a-z][a-zA-Z0-9]*$/;

function keysOf(value: unknown, path = ''): string[] {
  if (Array.isArray(value)) return value.flatMap((v, i) => keysOf(v, `${path}[${i}]`));
  if (value === null || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([k, v]) => [`${path}.${k}`, ...keysOf(v, `${path}.${k}`)]);
}

const status: StatusDocument = {
  id: 'm1',
  runId: 'r1',
  state: 'SUCCEEDED',
  phase: 'COMPLETED',
  paused: false,
  tables: [
    {
      source: 'public.a',
      target: 'public.a',
      phase: 'COMPLETED',
      rowsCopied: 10,
      rowsEstimated: 10,
      chunks: [{ state: 'DONE', rowsCopied: 10, checkpoint: ['10'] }],
      lag: { pendingChanges: 0, seconds: 0, changesApplied: 3 },
    },
  ],
  events: [{ seq: 1, type: 'MigrationStarted', at: '2026-12-01T10:00:00.000Z', detail: { tables: 1 } }],
  transitions: [
    { machine: 'state', from: 'RUNNING', to: 'SUCCEEDED', at: '2026-12-01T10:01:00.000Z' },
    { machine: 'control', signal: 'pause', from: 'running', to: 'paused', at: '2026-12-01T10:00:30.000Z', actor: 'alice' },
  ],
  startedAt: '2026-12-01T10:00:00.000Z',
  endedAt: '2026-12-01T10:01:00.000Z',
  cutover: { frozenAt: '2026-12-01T10:00:50.000Z', writeOutageMs: 120, dirtyRowsChecked: 2, afterwards: 'unfreeze' },
  timeline: [{ step: 'preflight', startedAt: '2026-12-01T10:00:00.000Z', endedAt: '2026-12-01T10:00:01.000Z', ms: 1000 }],
};

const change: ChangeStatusDocument = {
  kind: 'change',
  id: 'c1',
  runId: 'r2',
  database: 'app',
  state: 'FAILED',
  phase: 'FAILED',
  paused: false,
  throttle: {},
  steps: [{ index: 0, kind: 'backfill', label: 'backfill shop.orders', state: 'FAILED', rowsUpdated: 5, error: { message: 'boom', type: 'PostgresError.23514' } }],
  events: [],
  transitions: [],
  error: { message: 'step 1 failed', cause: 'boom' },
  startedAt: '2026-12-01T10:00:00.000Z',
  endedAt: '2026-12-01T10:00:05.000Z',
};

describe('the result document and list entries', () => {
  const ajv = new Ajv2020({ strict: false, validateFormats: false });
  ajv.addSchema(schema);
  const validate = (ref: string, doc: unknown) => {
    const ok = ajv.validate(`${schema.$id}#/$defs/${ref}`, doc);
    return ok ? [] : ajv.errors;
  };

  it('match the published schema', () => {
    expect(validate('migrationResult', resultDocument(status, { team: 'x' }))).toEqual([]);
    expect(validate('changeResult', changeResultDocument(change, undefined))).toEqual([]);
    const entry: MigrationSummary = { id: 'm1', kind: 'migration', state: 'FAILED', phase: 'FAILED', source: 'a', target: 'b', startedAt: status.startedAt, rows: 3, error: { message: 'x' } };
    expect(validate('listEntry', entry)).toEqual([]);
    // A field the schema does not know is refused: a new name has to be added there, in its style.
    expect(validate('migrationResult', { ...resultDocument(status, undefined), rows_copied: 10 })).not.toEqual([]);
  });

  it('lists the tables that did not complete, past RESULT_TABLES_LISTED tables, and counts the rest by phase', () => {
    const table = status.tables[0];
    const many: StatusDocument = {
      ...status,
      state: 'FAILED',
      tables: Array.from({ length: RESULT_TABLES_LISTED + 300 }, (_, i) => ({ ...table, source: `public.t${i}`, target: `public.t${i}`, phase: i % 400 === 7 ? 'FAILED' : 'COMPLETED' })),
    };
    const doc = resultDocument(many, undefined);
    expect(doc.tables.map((t) => t.source)).toEqual(['public.t7', 'public.t407', 'public.t807', 'public.t1207']);
    expect(doc.tablesOmitted).toEqual({ count: RESULT_TABLES_LISTED + 296, byPhase: { COMPLETED: RESULT_TABLES_LISTED + 296 } });
    expect(doc.rowsCopied).toBe((RESULT_TABLES_LISTED + 300) * table.rowsCopied);
    expect(validate('migrationResult', doc)).toEqual([]);
    // Past the limit even among those that did not complete: the first RESULT_TABLES_LISTED, the rest counted.
    const failed = resultDocument({ ...many, tables: many.tables.map((t) => ({ ...t, phase: 'PENDING' as const })) }, undefined);
    expect([failed.tables.length, failed.tablesOmitted]).toEqual([RESULT_TABLES_LISTED, { count: 300, byPhase: { PENDING: 300 } }]);
    // Up to the limit, every table and nothing omitted.
    expect(resultDocument({ ...many, tables: many.tables.slice(0, RESULT_TABLES_LISTED) }, undefined)).not.toHaveProperty('tablesOmitted');
  });

  it('name every field camelCase but the callback contract\'s, at any depth', () => {
    for (const doc of [resultDocument(status, { team: 'x' }), changeResultDocument(change, undefined)]) {
      const keys = keysOf({ ...doc, metadata: null });
      const odd = keys.filter((k) => {
        const name = k.split('.').pop()!;
        return !camel.test(name) && !(k.split('.').length === 2 && CONTRACT.includes(name));
      });
      expect(odd).toEqual([]);
      for (const name of CONTRACT) expect(Object.keys(doc)).toContain(name);
    }
    const schemaKeys = keysOf(schema.$defs)
      .filter((k) => /\.properties\.[^.]+$/.test(k))
      .map((k) => k.split('.').pop()!);
    expect(schemaKeys.filter((k) => !camel.test(k) && !CONTRACT.includes(k))).toEqual([]);
  });

  it('reads a document an older Ferry wrote under the current names', () => {
    const old = { task_id: 'm0', rows_copied: 7, warnings: [] };
    expect(currentResultNames(old)).toEqual({ task_id: 'm0', rowsCopied: 7, warnings: [] });
    expect(currentResultNames({ task_id: 'c0', rows_backfilled: 2 })).toEqual({ task_id: 'c0', rowsBackfilled: 2 });
    const current = resultDocument(status, undefined);
    expect(currentResultNames(current)).toBe(current);
  });
});
