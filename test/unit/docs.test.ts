/**
 * The documentation holds to the code and to itself: the references generated from the code
 * (docs/reference/, `npm run docs`) are current, every link of README.md and docs/ leads to a
 * file and a heading that exist, and the README stays a front door.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { anchors, brokenLinks, slug } from '../../src/dev/docs/links';
import { referenceDocs } from '../../src/dev/docs/reference';

const ROOT = join(__dirname, '..', '..');
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');

function markdownUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? markdownUnder(`${dir}/${e.name}`) : e.name.endsWith('.md') ? [`${dir}/${e.name}`] : [],
  );
}

describe('the documentation', () => {
  it('has every generated reference as the code generates it now (npm run docs rewrites them)', () => {
    const stale = [...referenceDocs()].filter(([path, text]) => !existsSync(join(ROOT, path)) || read(path) !== text).map(([path]) => path);
    expect(stale).toEqual([]);
  });

  it('makes anchors as GitHub does', () => {
    expect(slug('Switching the application over (`cutover.switch`)')).toBe('switching-the-application-over-cutoverswitch');
    expect(slug('Limits (honest)')).toBe('limits-honest');
    expect(slug('5. Fencing and resumption')).toBe('5-fencing-and-resumption');
    expect(slug('Capture: triggers or the write-ahead log')).toBe('capture-triggers-or-the-write-ahead-log');
    expect(slug('`objects: all` — every object')).toBe('objects-all--every-object');
    expect(slug('FERRY_NATS_URL')).toBe('ferry_nats_url');
    expect([...anchors('# A\n## A\n```\n# not a heading\n```\n## B\n')]).toEqual(['a', 'a-1', 'b']);
  });

  it('links only to files and headings that exist, from README.md and every file under docs/', () => {
    const repo = { exists: (path: string) => existsSync(join(ROOT, path)), read };
    const files = ['README.md', ...markdownUnder('docs')];
    expect(files.length).toBeGreaterThan(10);
    const broken = files.flatMap((path) => brokenLinks(path, read(path), repo));
    expect(broken).toEqual([]);
  });

  it('keeps the README a front door: at most 250 lines, naming npm test as the test command', () => {
    const readme = read('README.md');
    expect(readme.split('\n').length).toBeLessThanOrEqual(250);
    expect(readme).toMatch(/^npm test\b/m);
  });
});
