/**
 * The patch flags (workflows/patches.ts): one per id of src/core/names.ts PATCHES, each read by
 * some workflow (a patch no workflow reads any more has been retired and leaves PATCHES), and
 * each one `patched(id)` of its own id.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PATCHES } from '../../src/core/names';
import { ROOT, sourceFiles } from '../helpers/source-files';

const root = ROOT;


describe('patch flags', () => {
  const workflows = sourceFiles('workflows').map((path) => readFileSync(join(root, path), 'utf8')).join('\n');

  it('asks patched() only through the flags, and every flag is read by a workflow', () => {
    const direct = workflows.split('\n').filter((line) => /\bpatched\(/.test(line) && !/^\s*(\*|\/\/)/.test(line));
    expect(direct).toEqual(['  Object.fromEntries(Object.entries(PATCHES).map(([name, id]) => [name, { get: () => patched(id), enumerable: true }])),']);
    const unread = Object.keys(PATCHES).filter((name) => !new RegExp(`flags\\.${name}\\b`).test(workflows));
    expect(unread).toEqual([]);
  });

  it('gives every patch a distinct id', () => {
    const ids = Object.values(PATCHES);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("reads a flag by asking the SDK for its own id, each time it is read", () => {
    jest.isolateModules(() => {
      const asked: string[] = [];
      jest.doMock('@temporalio/workflow', () => ({ patched: (id: string) => (asked.push(id), id === PATCHES.sameControls) }));
      const { flags } = require('../../workflows/patches') as typeof import('../../workflows/patches');
      expect(asked).toEqual([]);
      expect(flags.sameControls).toBe(true);
      expect(flags.batchesByBytes).toBe(false);
      expect(asked).toEqual([PATCHES.sameControls, PATCHES.batchesByBytes]);
    });
  });
});
