/** Batch ends stepped to by arithmetic on a single integer key (src/core/key-stride.ts). */
import { KeyStride } from '../../src/core/key-stride';
import { KeyColumn } from '../../src/core/plan';

const column = (type: string): KeyColumn => ({ name: 'id', type, collatable: false });

describe('KeyStride', () => {
  it('only steps through one integer column', () => {
    const chunk = { lower: null, upper: null };
    expect(KeyStride.of([column('text')], chunk)).toBeUndefined();
    expect(KeyStride.of([column('numeric')], chunk)).toBeUndefined();
    expect(KeyStride.of([column('integer'), column('integer')], chunk)).toBeUndefined();
    for (const type of ['smallint', 'integer', 'bigint']) expect(KeyStride.of([column(type)], chunk)).toBeInstanceOf(KeyStride);
  });

  it('knows no density before a batch with both ends known, and none from a batch that strayed', () => {
    const stride = KeyStride.of([column('bigint')], { lower: null, upper: null })!;
    expect(stride.endAfter(['100'], 10)).toBeUndefined();
    // The first batch of an unbounded chunk: where it began is unknown.
    expect(stride.learnsFrom(null)).toBe(false);
    expect(stride.learnsFrom(['100'])).toBe(true);
    stride.record(null, ['100'], 10, 10);
    expect(stride.endAfter(['100'], 10)).toBeUndefined();
    stride.record(['100'], ['300'], 10, 10); // 20 key units a row
    expect(stride.endAfter(['300'], 10)).toEqual({ end: ['500'] });
    stride.record(['300'], ['500'], 25, 10); // two and a half times the rows wanted
    expect(stride.endAfter(['500'], 10)).toBeUndefined();
    stride.record(['500'], ['600'], 4, 10);
    expect(stride.endAfter(['600'], 10)).toBeUndefined();
    stride.record(['600'], ['700'], 0, 10);
    expect(stride.endAfter(['700'], 10)).toBeUndefined();
  });

  it("learns from a bounded chunk's first batch, below zero too", () => {
    const stride = KeyStride.of([column('integer')], { lower: ['-1000'], upper: ['1000'] })!;
    expect(stride.learnsFrom(null)).toBe(true);
    stride.record(null, ['-901'], 50, 50); // keys -1000 … -901: two units a row
    expect(stride.endAfter(['-901'], 50)).toEqual({ end: ['-801'] });
    // Never a fraction of a key, never less than one key.
    stride.record(['-801'], ['-800'], 50, 50);
    expect(stride.endAfter(['-800'], 10)).toEqual({ end: ['-799'] });
  });

  it("ends at the chunk's upper bound or the type's largest value, without overflowing", () => {
    const bounded = KeyStride.of([column('integer')], { lower: ['0'], upper: ['1000'] })!;
    bounded.record(null, ['99'], 100, 100);
    expect(bounded.endAfter(['900'], 98)).toEqual({ end: ['998'] });
    expect(bounded.endAfter(['900'], 99)).toEqual({ end: null }); // 999 is the chunk's last key
    const small = KeyStride.of([column('smallint')], { lower: ['32000'], upper: null })!;
    small.record(null, ['32099'], 100, 100);
    expect(small.endAfter(['32600'], 166)).toEqual({ end: ['32766'] });
    expect(small.endAfter(['32600'], 200)).toEqual({ end: null });
    const big = KeyStride.of([column('bigint')], { lower: ['9223372036854775000'], upper: null })!;
    big.record(null, ['9223372036854775099'], 100, 100);
    expect(big.endAfter(['9223372036854775700'], 100)).toEqual({ end: ['9223372036854775800'] });
    expect(big.endAfter(['9223372036854775700'], 1000)).toEqual({ end: null });
  });
});
