/**
 * The behaviour changes a workflow asks about, as named flags: `flags.batchesByBytes` is
 * `patched('batches-by-bytes')` (src/core/names.ts PATCHES holds the ids and what each changed).
 * A flag is read where the workflow first needs it, and the SDK keeps that first answer for the
 * rest of the run, so each is read once. Not all at the start: replaying an old history, the SDK
 * knows only the markers of the workflow task it is at, and a flag read before its marker's task
 * would answer false where the recorded run had answered true.
 */
import { patched } from '@temporalio/workflow';
import { PATCHES } from '../src/core/names';

export type PatchFlags = { readonly [K in keyof typeof PATCHES]: boolean };

export const flags: PatchFlags = Object.defineProperties(
  {},
  Object.fromEntries(Object.entries(PATCHES).map(([name, id]) => [name, { get: () => patched(id), enumerable: true }])),
) as PatchFlags;
