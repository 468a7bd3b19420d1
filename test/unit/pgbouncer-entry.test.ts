/** PgBouncer's database entries as the switch rewrites them: the server replaced, every other setting kept. */
import { entrySettings, findEntry, repointedEntry, withLine } from '../../src/core/pgbouncer-entry';

const FILE = ['[databases]', '; the shop', 'shop_ro = host=replica1 dbname=shop', 'shop = host=db1 port=5432 dbname=shop pool_size=40 connect_query=\'SET x = 1\'', '"odd-name" = host=db1', ''].join('\n');
const TARGET = { host: '10.0.0.7', port: 5433, dbname: 'shop_v2', user: 'ferry', password: 'pw' };

describe("PgBouncer's database entries", () => {
  it('finds the entry of one database, not a comment or another entry, quoted names too', () => {
    expect(findEntry(FILE, 'shop')).toEqual({ index: 3, line: FILE.split('\n')[3] });
    expect(findEntry(FILE, 'odd-name')?.index).toBe(4);
    expect(findEntry(FILE, 'shop_v2')).toBeUndefined();
  });

  it('reads its settings, single-quoted values with their spaces and doubled quotes', () => {
    expect(entrySettings("a = host=h connect_query='SELECT ''x'' ' port=1")).toEqual([
      ['host', 'h'],
      ['connect_query', "SELECT 'x' "],
      ['port', '1'],
    ]);
  });

  it('points it at another server: host, port and dbname replaced, the other settings kept, no user forced on an entry without one', () => {
    const line = repointedEntry(findEntry(FILE, 'shop')!.line, 'shop', TARGET);
    expect(line).toBe("shop = host=10.0.0.7 port=5433 dbname=shop_v2 pool_size=40 connect_query='SET x = 1'");
    expect(repointedEntry('shop = dbname=shop auth_user=pgb', 'shop', TARGET)).toBe('shop = dbname=shop_v2 auth_user=pgb host=10.0.0.7 port=5433');
    expect(repointedEntry('shop = host=db1 user=app password=old', 'shop', TARGET)).toBe('shop = host=10.0.0.7 user=ferry password=pw port=5433 dbname=shop_v2');
    expect(repointedEntry('"odd-name" = host=db1', 'odd-name', TARGET)).toBe('"odd-name" = host=10.0.0.7 port=5433 dbname=shop_v2');
  });

  it('replaces only that line of the file', () => {
    const { index } = findEntry(FILE, 'shop')!;
    const next = withLine(FILE, index, 'shop = host=x');
    expect(next.split('\n')).toEqual(FILE.split('\n').map((l, i) => (i === index ? 'shop = host=x' : l)));
  });
});
