import { columnFit, ColumnType } from '../../src/db/column-fit';

const numeric = (p: number, s: number): ColumnType => ({ name: 'c', type: `numeric(${p},${s})`, typeOid: 1700, typmod: ((p << 16) | s) + 4 });
const varchar = (n: number): ColumnType => ({ name: 'c', type: `character varying(${n})`, typeOid: 1043, typmod: n + 4 });
const plain = (type: string, typeOid: number): ColumnType => ({ name: 'c', type, typeOid, typmod: -1 });

describe('whether a target column takes every value of the source column', () => {
  it('takes the same type and modifier, a user type by the same name, and anything into unconstrained text', () => {
    expect(columnFit(numeric(12, 2), numeric(12, 2), false)).toBe('same');
    expect(columnFit(plain('public.mood', 16500), plain('public.mood', 17001), false)).toBe('same');
    expect(columnFit(numeric(12, 2), plain('text', 25), false)).toBe('text');
    expect(columnFit(plain('jsonb', 3802), plain('character varying', 1043), false)).toBe('text');
  });

  it('takes wider modifiers and the implicit integer widenings, nothing narrower', () => {
    expect(columnFit(numeric(12, 2), numeric(14, 2), false)).toBe('wider');
    expect(columnFit(numeric(12, 2), plain('numeric', 1700), false)).toBe('wider');
    expect(columnFit(varchar(10), varchar(20), false)).toBe('wider');
    expect(columnFit(plain('smallint', 21), plain('bigint', 20), true)).toBe('wider');
    expect(columnFit(plain('integer', 23), plain('numeric', 1700), true)).toBe('wider');
    expect(columnFit(numeric(12, 2), numeric(5, 2), false)).toBe('no');
    expect(columnFit(numeric(12, 2), numeric(14, 3), false)).toBe('no');
    expect(columnFit(varchar(10), varchar(4), false)).toBe('no');
    expect(columnFit(plain('text', 25), plain('integer', 23), true)).toBe('no');
    expect(columnFit(plain('bigint', 20), plain('integer', 23), false)).toBe('no');
    // Without the target catalog's implicit cast, no widening is assumed.
    expect(columnFit(plain('integer', 23), plain('bigint', 20), false)).toBe('no');
    expect(columnFit(plain('integer', 23), numeric(10, 0), true)).toBe('no');
    expect(columnFit(varchar(10), plain('text', 25), false)).toBe('text');
    expect(columnFit(varchar(10), { name: 'c', type: 'character(10)', typeOid: 1042, typmod: 14 }, false)).toBe('no');
  });
});
