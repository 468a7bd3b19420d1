/**
 * Logical capture's pure parts: which capture preflight resolves from the spec's choice and the
 * source's problems, which keys one decoded change asks to re-sync, and — for a table without a
 * key — which rows it takes away and adds, and their net effect.
 */
import { changedKeys, rowOps } from '../../activities/stream-changes';
import { netEffect } from '../../src/db/keyless-ops';
import { resolveCapture } from '../../src/core/capture-mode';
import type { StatusDocument } from '../../src/core/status';
import { formatStatus } from '../../src/view/format';
import type { Pgoutput } from 'pg-logical-replication';

const relation = { tag: 'relation', relationOid: 1, schema: 'public', name: 't', replicaIdentity: 'default', columns: [], keyColumns: ['a', 'b'] } as Pgoutput.MessageRelation;

describe('resolveCapture', () => {
  it('keeps trigger whatever the source allows', () => {
    expect(resolveCapture('trigger', ['wal_level is replica: …'])).toEqual({ ok: true, plan: { mode: 'trigger', reason: 'capture: trigger in the spec' } });
  });

  it('chooses logical under auto and logical when nothing is missing', () => {
    expect(resolveCapture('auto', [])).toEqual({ ok: true, plan: { mode: 'logical', reason: 'capture: auto, and the source allows logical decoding' } });
    expect(resolveCapture('logical', [])).toEqual({ ok: true, plan: { mode: 'logical', reason: 'capture: logical in the spec' } });
  });

  it('falls back to triggers under auto, and refuses logical, naming every problem', () => {
    const problems = ['wal_level is replica: set wal_level = logical', "Ferry's role lacks the REPLICATION attribute"];
    expect(resolveCapture('auto', problems)).toEqual({
      ok: true,
      plan: { mode: 'trigger', reason: "capture: auto, and logical capture is not possible: wal_level is replica: set wal_level = logical; Ferry's role lacks the REPLICATION attribute" },
    });
    const refused = resolveCapture('logical', problems);
    expect(refused.ok).toBe(false);
    expect(!refused.ok && refused.reason).toBe(
      "capture: logical is not possible on this source: wal_level is replica: set wal_level = logical; Ferry's role lacks the REPLICATION attribute; or set capture: trigger (or auto, which falls back to triggers)",
    );
  });
});

describe('changedKeys', () => {
  const keys = ['a', 'b'];
  it('takes the new key of an insert, as text', () => {
    expect(changedKeys({ tag: 'insert', relation, new: { a: '1', b: 'x', v: '7' } }, keys)).toEqual([['1', 'x']]);
  });

  it('takes the new key of an update, and the old one only when it comes (a key change)', () => {
    expect(changedKeys({ tag: 'update', relation, key: null, old: null, new: { a: '1', b: 'x' } }, keys)).toEqual([['1', 'x']]);
    expect(changedKeys({ tag: 'update', relation, key: { a: '1', b: 'w', v: null }, old: null, new: { a: '1', b: 'x' } }, keys)).toEqual([
      ['1', 'x'],
      ['1', 'w'],
    ]);
    // REPLICA IDENTITY FULL sends the whole old row, even when the key stayed.
    expect(changedKeys({ tag: 'update', relation, key: null, old: { a: '1', b: 'x', v: '6' }, new: { a: '1', b: 'x', v: '7' } }, keys)).toEqual([['1', 'x']]);
  });

  it('takes the old key of a delete, from the key or the full old row', () => {
    expect(changedKeys({ tag: 'delete', relation, key: { a: '2', b: 'y' }, old: null }, keys)).toEqual([['2', 'y']]);
    expect(changedKeys({ tag: 'delete', relation, key: null, old: { a: '3', b: 'z', v: '1' } }, keys)).toEqual([['3', 'z']]);
  });

  it('refuses a change whose key value did not come (it cannot tell which row changed)', () => {
    expect(() => changedKeys({ tag: 'insert', relation, new: { a: '1' } }, keys)).toThrow('a change arrived without the value of key column "b" (not sent)');
    // A delete without its old row (replica identity NOTHING): never a key silently dropped.
    expect(() => changedKeys({ tag: 'delete', relation, key: null, old: null }, keys)).toThrow('a delete arrived without its old key');
  });

  it('asks nothing of other messages', () => {
    expect(changedKeys({ tag: 'commit', flags: 0, commitLsn: '0/1', commitEndLsn: '0/2', commitTime: BigInt(0) }, keys)).toEqual([]);
  });
});

describe('rowOps (a table without a key)', () => {
  const lsn = '0/16B3748';
  it('adds the new row of an insert, takes away the old row of a delete, and both for an update, numbered in their transaction', () => {
    expect(rowOps({ tag: 'insert', relation, new: { a: '1', b: null } }, lsn, 0, 'public.t')).toEqual([{ lsn, seq: 0, delta: 1, image: { a: '1', b: null } }]);
    expect(rowOps({ tag: 'delete', relation, key: null, old: { a: '1', b: null } }, lsn, 3, 'public.t')).toEqual([{ lsn, seq: 3, delta: -1, image: { a: '1', b: null } }]);
    expect(rowOps({ tag: 'update', relation, key: null, old: { a: '1', b: 'x' }, new: { a: '2', b: 'x' } }, lsn, 4, 'public.t')).toEqual([
      { lsn, seq: 4, delta: -1, image: { a: '1', b: 'x' } },
      { lsn, seq: 5, delta: 1, image: { a: '2', b: 'x' } },
    ]);
  });

  it('refuses a change without its old row (the replica identity is no longer FULL) or with a value that did not come', () => {
    expect(() => rowOps({ tag: 'delete', relation, key: { a: '1' }, old: null }, lsn, 0, 'public.t')).toThrow(
      'a change of public.t arrived without its old row: its replica identity is no longer FULL',
    );
    expect(() => rowOps({ tag: 'update', relation, key: null, old: { a: '1' }, new: { a: '1', b: undefined } }, lsn, 0, 'public.t')).toThrow(
      'a change of public.t arrived without the value of column "b"',
    );
  });

  it('nets a stretch of changes per row image: equal rows add up, a row added and taken away is nothing', () => {
    const ops = [
      { delta: 1 as const, image: { a: '1' } },
      { delta: 1 as const, image: { a: '1' } },
      { delta: -1 as const, image: { a: '2' } },
      { delta: 1 as const, image: { a: '3' } },
      { delta: -1 as const, image: { a: '3' } },
    ];
    expect([...netEffect(ops)]).toEqual([
      ['{"a":"1"}', 2],
      ['{"a":"2"}', -1],
    ]);
  });
});

describe('the slot in ferry status', () => {
  const status = (capture: StatusDocument['capture']): StatusDocument => ({
    id: 'm',
    runId: 'r',
    state: 'RUNNING',
    phase: 'AWAITING_APPROVAL',
    paused: false,
    tables: [],
    events: [],
    transitions: [],
    startedAt: '2026-12-01T00:00:00.000Z',
    capture,
  });

  it('shows the lag, and warns once max_slot_wal_keep_size leaves less than the slot already holds', () => {
    const quiet = formatStatus(status({ mode: 'logical', confirmedLsn: '0/1A2B', slotLagBytes: 4096, slotLagSeconds: 0.2, safeWalBytes: null }));
    expect(quiet).toContain('capture: logical  slot lag 4096 bytes, 0.2s  confirmed 0/1A2B');
    expect(quiet).not.toContain('warning');
    const near = formatStatus(status({ mode: 'logical', confirmedLsn: '0/1A2B', slotLagBytes: 8_000_000, slotLagSeconds: 40, safeWalBytes: 1_000_000 }));
    expect(near).toContain('warning: the slot may hold only 1000000 more bytes of WAL before max_slot_wal_keep_size invalidates it');
  });
});
