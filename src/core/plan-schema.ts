/**
 * The plan's zod schema (src/core/plan.ts checkPlan parses with it). A plan enters a workflow
 * from outside Ferry's own preflight (a workflow argument, a bookkeeping row for `ferry retry`)
 * and is checked against its shape before anything uses it. Identifiers are quoted wherever they
 * are used and key types are read from the catalog (src/db/catalog.ts withCatalogKeyTypes), so a
 * plan can name tables, not smuggle SQL. Loaded on first use for the reason
 * src/core/spec-schema.ts gives.
 */
import { z } from 'zod';
import { MAX_TABLES } from './spec-limits';

const name = z.string().min(1).max(200);
const qualified = z.strictObject({ schema: name, name });
const key = z.array(z.string().max(10_000)).min(1).max(32);
export const tablePlanSchema = z.strictObject({
  index: z.number().int().min(0).max(MAX_TABLES),
  source: qualified,
  target: qualified,
  columns: z.array(name).min(1).max(1600),
  keyColumns: z.array(z.strictObject({ name, type: z.string().max(200), collatable: z.boolean() })).max(32),
  copyFormat: z.enum(['binary', 'text']),
  keyCollateC: z.boolean(),
  rowsEstimated: z.number().min(0),
  chunks: z.array(z.strictObject({ index: z.number().int().min(0).max(10_000), lower: key.nullable(), upper: key.nullable() })).min(1).max(256),
  validationUnits: z.array(z.strictObject({ chunk: z.number().int().min(0).max(10_000), lower: key.nullable(), upper: key.nullable() })).max(100_000).optional(),
  notes: z.array(z.string().max(2000)).max(1000).optional(),
  targetNames: z.record(name, name).optional(),
  copyBy: z.enum(['blocks', 'snapshot']).optional(),
  targetExisted: z.boolean(),
  sourceWrites: z.number().min(0),
});

export const planTablesSchema = z.array(tablePlanSchema).max(MAX_TABLES);

export const planSchema = z
  .strictObject({
    tables: planTablesSchema,
    sourceServer: z.string().max(200),
    targetServer: z.string().max(200),
    source: z.strictObject({ serverVersion: z.number().int().min(0) }).optional(),
    target: z.strictObject({ serverVersion: z.number().int().min(0) }).optional(),
    targetReplicaRole: z.boolean().optional(),
    capture: z.strictObject({ mode: z.enum(['trigger', 'logical']), reason: z.string().max(4000) }).optional(),
    objects: z
      .strictObject({
        schemas: z.array(name).min(1).max(10_000),
        extensions: z.array(name).max(1000),
        excludedTables: z.array(qualified).max(100_000),
        before: z.number().int().min(0),
        after: z.number().int().min(0),
        kinds: z.record(z.string().max(100), z.number().int().min(0)),
        sequences: z.array(qualified).max(100_000),
      })
      .optional(),
    stored: z.strictObject({ tables: z.number().int().min(1).max(MAX_TABLES) }).optional(),
    moreTables: z.number().int().min(1).max(MAX_TABLES).optional(),
  })
  // A plan lists its tables, unless they are stored on the target.
  .refine((plan) => plan.tables.length > 0 || plan.stored !== undefined, { message: 'a plan lists at least one table', path: ['tables'] });
