import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, connectionOptions, temporalConfig } from '../../src/config';
import { autoChunkCount, pickBoundaries, rangesFromBoundaries, validationUnits } from '../../src/core/chunks';
import { nextRoundKeys, shareByKeyHash } from '../../activities/sync-changes';
import { collationVersionsDiffer, sameCollation } from '../../activities/preflight';
import { etaText, figuresText, RateWindow, rateText } from '../../src/view/watch';
import { chunkRateCap, tablesSharing } from '../../src/core/rate';
import { BatchSize, UNSIZED_BATCH_ROWS } from '../../src/core/batch-size';
import { BATCH_BYTES } from '../../src/core/spec-limits';
import { formatDuration, parseDuration } from '../../src/core/duration';
import { displayQualified, parseQualifiedName, quoteIdent, quoteQualified, withSuffix } from '../../src/core/identifiers';
import { arrayLiteral, keyInList, keyPredicate, literalBinder, ParamBinder } from '../../src/db/ranges';
import { classify } from '../../src/db/errors';

describe('durations', () => {
  it.each([
    ['500ms', 500],
    ['90s', 90_000],
    ['1h30m', 5_400_000],
    ['2d', 172_800_000],
    ['1.5s', 1500],
  ])('parses %s', (text, ms) => expect(parseDuration(text)).toBe(ms));

  it.each(['', '12', 'h', '1 h', '-1s', '1y', '1h 30m'])('refuses %j', (text) => expect(parseDuration(text)).toBeUndefined());

  it('formats like Go', () => {
    expect(formatDuration(90_500)).toBe('1m30.5s');
    expect(formatDuration(250)).toBe('250ms');
    expect(formatDuration(3_723_000)).toBe('1h2m3s');
  });
});

describe('identifiers', () => {
  it('quotes every identifier, doubling embedded quotes', () => {
    expect(quoteIdent('orders')).toBe('"orders"');
    expect(quoteIdent('a"b')).toBe('"a""b"');
    expect(quoteQualified({ schema: 'x; DROP', name: 'y' })).toBe('"x; DROP"."y"');
    expect(() => quoteIdent('a\u0000b')).toThrow();
  });

  it('parses and displays names the way PostgreSQL does', () => {
    expect(parseQualifiedName('Public.Orders')).toEqual({ schema: 'public', name: 'orders' });
    expect(parseQualifiedName('"A"."b.c"')).toEqual({ schema: 'A', name: 'b.c' });
    expect(parseQualifiedName('a.b.c')).toMatch(/schema\.table/);
    expect(parseQualifiedName(`public.${'x'.repeat(64)}`)).toMatch(/longer than 63 bytes/);
    expect(displayQualified({ schema: 'app', name: 'Order Lines' })).toBe('app."Order Lines"');
  });

  it('adds a suffix within 63 bytes, cutting the name on a character boundary', () => {
    expect(withSuffix('items_id_seq', '_ferry_1')).toBe('items_id_seq_ferry_1');
    expect(withSuffix('x'.repeat(63), '_ferry_12')).toBe(`${'x'.repeat(54)}_ferry_12`);
    const cut = withSuffix('é'.repeat(40), '_ferry_1');
    expect(new TextEncoder().encode(cut).length).toBeLessThanOrEqual(63);
    expect(cut).toBe(`${'é'.repeat(27)}_ferry_1`);
  });
});

describe('chunk planning', () => {
  const keys = Array.from({ length: 100 }, (_, i) => [String(i * 10)]);

  it('cuts sorted keys into even ranges that cover everything', () => {
    const chunks = rangesFromBoundaries(pickBoundaries(keys, 4));
    expect(chunks).toEqual([
      { index: 0, lower: null, upper: ['250'] },
      { index: 1, lower: ['250'], upper: ['500'] },
      { index: 2, lower: ['500'], upper: ['750'] },
      { index: 3, lower: ['750'], upper: null },
    ]);
  });

  it('never makes empty or duplicate boundaries from few keys', () => {
    expect(rangesFromBoundaries(pickBoundaries([['1']], 8))).toEqual([{ index: 0, lower: null, upper: null }]);
    expect(pickBoundaries([['1'], ['2']], 8)).toEqual([['2']]);
    expect(pickBoundaries([], 4)).toEqual([]);
  });

  it('sizes automatic chunk counts from row estimates, up to the parallelism', () => {
    expect(autoChunkCount(0, 4)).toBe(1);
    expect(autoChunkCount(2_000_000, 8)).toBe(4);
    expect(autoChunkCount(2_000_000, 2)).toBe(2);
    expect(autoChunkCount(1e12, 16)).toBe(16);
  });
});

describe('validation units', () => {
  const keys = Array.from({ length: 100 }, (_, i) => [String(i).padStart(3, '0')]);
  const chunks = rangesFromBoundaries(pickBoundaries(keys, 2));

  it('cut each chunk into ranges of about a million rows, inside the chunk', () => {
    // 4,000,000 rows in 2 chunks: 2 units of about 1,000,000 rows per chunk.
    expect(validationUnits(keys, chunks, 4_000_000)).toEqual([
      { chunk: 0, lower: null, upper: ['025'] },
      { chunk: 0, lower: ['025'], upper: ['050'] },
      { chunk: 1, lower: ['050'], upper: ['075'] },
      { chunk: 1, lower: ['075'], upper: null },
    ]);
  });

  it('are not needed while a chunk holds a million rows or fewer', () => {
    expect(validationUnits(keys, chunks, 2_000_000)).toEqual([]);
  });

  it('still cover one unbounded chunk', () => {
    const units = validationUnits(keys, [{ index: 0, lower: null, upper: null }], 3_000_000);
    expect(units.map((u) => [u.lower?.[0] ?? '-', u.upper?.[0] ?? '+'])).toEqual([
      ['-', '033'],
      ['033', '066'],
      ['066', '+'],
    ]);
  });
});

describe('key collations', () => {
  it('are the same when their locales are, however the codeset is spelled or the collation named', () => {
    expect(sameCollation('default:en_US.UTF-8', 'default:en_US.utf8')).toBe(true);
    expect(sameCollation('default:en_US.UTF-8', 'en_US:en_US.utf8')).toBe(true);
    expect(sameCollation('default:C', 'POSIX:POSIX')).toBe(true);
  });

  it('differ when the locales do', () => {
    expect(sameCollation('default:en_US.UTF-8', 'default:de_DE.UTF-8')).toBe(false);
    expect(sameCollation('default:C', 'default:en_US.UTF-8')).toBe(false);
    expect(sameCollation('und-x-icu:', 'default:en_US.UTF-8')).toBe(false);
  });

  it('of one locale differ in order when their library versions do (glibc 2.28 against 2.36), not when a side reports none', () => {
    expect(collationVersionsDiffer('2.28', '2.36')).toBe(true);
    expect(collationVersionsDiffer('153.120', '153.120')).toBe(false);
    expect(collationVersionsDiffer('', '2.36')).toBe(false);
    expect(collationVersionsDiffer('', '')).toBe(false);
  });
});

describe('the rate cap', () => {
  it('is shared by the tables copying at once, and each table splits its share among its chunks copying at once', () => {
    // 4000 rows/s, 2 tables copying, 3 chunks left of which 2 copy at once: 1000 rows/s a chunk.
    expect(chunkRateCap({ rowsPerSecond: 4000, tablesSharing: 2 }, 2, 3)).toBe(1000);
    // The last chunk of a table copies alone: the table's whole share.
    expect(chunkRateCap({ rowsPerSecond: 4000, tablesSharing: 2 }, 2, 1)).toBe(2000);
    expect(chunkRateCap({ rowsPerSecond: 4000 }, 4, 8)).toBe(1000);
  });

  it('is absent without a cap, and never below one row a second', () => {
    expect(chunkRateCap({}, 2, 2)).toBeUndefined();
    expect(chunkRateCap({ rowsPerSecond: 0 }, 2, 2)).toBeUndefined();
    expect(chunkRateCap({ rowsPerSecond: 3, tablesSharing: 4 }, 2, 2)).toBe(1);
  });

  it('counts the tables that share it: those not copied yet, at most the tables copied at once', () => {
    expect(tablesSharing(2, 5)).toBe(2);
    expect(tablesSharing(4, 1)).toBe(1);
    expect(tablesSharing(4, 0)).toBe(1);
  });
});

describe('copy batch sizes', () => {
  it('are the given batchRows whatever the rows weigh', () => {
    const size = new BatchSize(2_000, 100, 500);
    size.record(2_000, 20_000_000);
    expect(size.next()).toBe(2_000);
  });

  it('hold about 64 MB by the sampled width, then by the width the batches measured', () => {
    const size = new BatchSize(undefined, 128, undefined);
    expect(size.next()).toBe(BATCH_BYTES / 128);
    size.record(10_000, 10_000 * 1024);
    expect(size.next()).toBe(BATCH_BYTES / 1024);
  });

  it('stay within 100 and 1,000,000 rows, and fall back to 50,000 without a width', () => {
    expect(new BatchSize(undefined, 4, undefined).next()).toBe(1_000_000);
    expect(new BatchSize(undefined, 10_000_000, undefined).next()).toBe(100);
    expect(new BatchSize(undefined, null, undefined).next()).toBe(UNSIZED_BATCH_ROWS);
  });

  it('take about a second of a capped copy', () => {
    expect(new BatchSize(undefined, 100, 5_000).next()).toBe(5_000);
    expect(new BatchSize(undefined, 100, 10).next()).toBe(100);
  });
});

describe('sync round sizes', () => {
  it('double while rounds are full and take under a second, up to four times the base', () => {
    expect(nextRoundKeys(5000, 5000, 200, 5000)).toBe(10_000);
    expect(nextRoundKeys(10_000, 10_000, 300, 5000)).toBe(20_000);
    expect(nextRoundKeys(20_000, 20_000, 300, 5000)).toBe(20_000);
  });

  it('halve after a round of more than four seconds, down to 100 keys', () => {
    expect(nextRoundKeys(5000, 5000, 4500, 5000)).toBe(2500);
    expect(nextRoundKeys(150, 120, 9000, 5000)).toBe(100);
  });

  it('stay as they are when the log ran out before the round was full', () => {
    expect(nextRoundKeys(5000, 40, 100, 5000)).toBe(5000);
  });
});

describe('apply lanes', () => {
  const keys = Array.from({ length: 1000 }, (_, i) => [String(i), i % 2 === 0 ? 'a' : 'b']);

  it('put every key in exactly one share, the same one every time', () => {
    const shares = shareByKeyHash(keys, 4);
    expect(shares.flat().map((k) => k.join('/')).sort()).toEqual(keys.map((k) => k.join('/')).sort());
    expect(shareByKeyHash([...keys].reverse(), 4).map((s) => new Set(s.map((k) => k.join('/'))))).toEqual(shares.map((s) => new Set(s.map((k) => k.join('/')))));
  });

  it('spread keys over the shares, none of them empty or holding most', () => {
    for (const share of shareByKeyHash(keys, 4)) expect(share.length).toBeGreaterThan(150);
    expect(shareByKeyHash(keys, 1)).toEqual([keys]);
  });
});

describe('key range predicates', () => {
  const shape = {
    keyColumns: [
      { name: 'a', type: 'integer', collatable: false },
      { name: 'b', type: 'text', collatable: true },
    ],
    keyCollateC: true,
  };

  it('compares composite keys as rows, with parameters', () => {
    const binder = new ParamBinder();
    const sql = keyPredicate(shape, [{ op: '>', key: ['1', "x'y"] }, { op: '<=', key: ['2', 'z'] }], binder);
    expect(sql).toBe('("a", "b" COLLATE "C") > ($1::integer, $2::text) AND ("a", "b" COLLATE "C") <= ($3::integer, $4::text)');
    expect(binder.params).toEqual(['1', "x'y", '2', 'z']);
  });

  it('escapes literals for COPY, which takes no parameters', () => {
    expect(keyPredicate(shape, [{ op: '>=', key: ['1', "it's\\"] }], literalBinder)).toBe(
      `("a", "b" COLLATE "C") >= ('1'::integer, E'it''s\\\\'::text)`,
    );
  });
});

describe('PostgreSQL error classification', () => {
  it.each([
    ['40001', 'retryable'],
    ['40P01', 'retryable'],
    ['55P03', 'retryable'],
    ['57P01', 'retryable'],
    ['08006', 'retryable'],
    ['53300', 'retryable'],
    ['42P01', 'fatal'],
    ['23505', 'fatal'],
    ['22P02', 'fatal'],
    ['42501', 'fatal'],
  ])('%s is %s', (code, kind) => expect(classify({ code })).toBe(kind));

  it('retries network errors, which carry no SQLSTATE', () => {
    expect(classify(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))).toBe('retryable');
  });
});

describe('key lists', () => {
  const single = { keyColumns: [{ name: 'id', type: 'bigint', collatable: false }], keyCollateC: false };
  const composite = {
    keyColumns: [
      { name: 'a', type: 'integer', collatable: false },
      { name: 'b', type: 'text', collatable: true },
    ],
    keyCollateC: false,
  };

  it('binds a whole key list as one array per column', () => {
    const binder = new ParamBinder();
    expect(keyInList(single, [['1'], ['2']], binder)).toBe('"id" = ANY ($1::bigint[])');
    expect(binder.params).toEqual([['1', '2']]);
    expect(keyInList(composite, [['1', 'x'], ['2', 'y']], new ParamBinder())).toBe(
      '("a", "b") IN (SELECT * FROM unnest($1::integer[], $2::text[]))',
    );
  });

  it('writes array literals that survive quotes, backslashes, commas and braces', () => {
    expect(arrayLiteral(['a', 'b"c', 'd\\e', 'f,g', '{h}', ''])).toBe('{"a","b\\"c","d\\\\e","f,g","{h}",""}');
    expect(keyInList(composite, [['1', "it's"]], literalBinder)).toBe(
      `("a", "b") IN (SELECT * FROM unnest('{"1"}'::integer[], '{"it''s"}'::text[]))`,
    );
  });
});

describe('Temporal connection settings from the environment', () => {
  const pem = (name: string, text: string) => {
    const file = join(mkdtempSync(join(tmpdir(), 'ferry-tls-')), name);
    writeFileSync(file, text);
    return file;
  };

  it('is plaintext by default, as the dev server wants', () => {
    const config = temporalConfig({});
    expect(config).toEqual({ address: '127.0.0.1:7233', namespace: 'default', taskQueue: 'ferry' });
    expect(connectionOptions(config)).toEqual({ address: '127.0.0.1:7233' });
  });

  it('reads mTLS certificates and an API key for a production cluster', () => {
    const config = temporalConfig({
      TEMPORAL_ADDRESS: 'ns.acct.tmprl.cloud:7233',
      TEMPORAL_TLS_CA: pem('ca.pem', 'CA'),
      TEMPORAL_TLS_CERT: pem('client.pem', 'CERT'),
      TEMPORAL_TLS_KEY: pem('client.key', 'KEY'),
      TEMPORAL_TLS_SERVER_NAME: 'temporal.internal',
      TEMPORAL_API_KEY: 'k-123',
    });
    const options = connectionOptions(config);
    expect(options.tls?.serverNameOverride).toBe('temporal.internal');
    expect(options.tls?.serverRootCACertificate?.toString()).toBe('CA');
    expect(options.tls?.clientCertPair?.crt.toString()).toBe('CERT');
    expect(options.tls?.clientCertPair?.key.toString()).toBe('KEY');
    expect(options.apiKey).toBe('k-123');
    expect(temporalConfig({ TEMPORAL_TLS: 'true' }).tls).toEqual({});
  });

  it('refuses half a certificate pair and unreadable files, naming the variable', () => {
    expect(() => temporalConfig({ TEMPORAL_TLS_CERT: pem('c.pem', 'x') })).toThrow(/TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together/);
    expect(() => temporalConfig({ TEMPORAL_TLS_CA: '/nonexistent/ca.pem' })).toThrow(/TEMPORAL_TLS_CA=\/nonexistent\/ca.pem: cannot read it/);
    expect(() => temporalConfig({ TEMPORAL_TLS: 'yes' })).toThrow(ConfigError);
  });
});

describe('ferry watch', () => {
  it('reads a rate from a sliding window of progress that arrives in steps, and an ETA only once there is one', () => {
    const w = new RateWindow(10_000, 3_000);
    expect(w.rate()).toBeUndefined();
    // 500 rows/s reported in 2 s steps of 1000 rows, sampled every second.
    for (let t = 0; t <= 20_000; t += 1000) w.add(t, Math.floor(t / 2000) * 1000);
    expect(Math.abs(w.rate()! - 500)).toBeLessThan(50);
    expect(etaText(0, 1000, undefined)).toBe('');
    expect(etaText(1000, 1000, 500)).toBe('');
    expect(etaText(0, 1000, 0)).toBe('');
    expect(etaText(500, 1000, 250)).toBe('ETA 2s');
    expect(rateText(undefined)).toBe('… rows/s');
  });

  it('pads a bar\'s figures so that the bars after them line up', () => {
    expect(figuresText(0, 25000)).toBe('  0%     0/25000 rows');
    expect(figuresText(1234, 25000)).toBe('  4%  1234/25000 rows');
    expect(figuresText(25000, 25000)).toBe('100% 25000/25000 rows');
    expect(new Set([0, 1234, 25000].map((rows) => figuresText(rows, 25000).length)).size).toBe(1);
  });
});
