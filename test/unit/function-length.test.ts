/**
 * No function in the product's code is longer than 60 lines of its own: its lines that are not
 * blank (comments count), less those of the functions written inside it. A factory that
 * returns an activity counts its own lines, the activity its own. Code kept only so old histories
 * replay (workflows/legacy, activities/legacy) is exempt: it must stay as it was recorded.
 */
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { ROOT, sourceFiles } from '../helpers/source-files';

const root = ROOT;
const LIMIT = 60;


interface Measured {
  where: string;
  name: string;
  own: number;
}

/** Every function's own code lines: its span's, less every nested function's interior. */
function measure(path: string, text: string): Measured[] {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const code = codeLinesOf(source);
  const out: Measured[] = [];
  const line = (pos: number) => source.getLineAndCharacterOfPosition(pos).line;
  const visit = (node: ts.Node, inside: Set<number>[] | undefined) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const mine = new Set<number>();
      for (let l = line(node.getStart(source)); l <= line(node.getEnd()); l += 1) if (code.has(l)) mine.add(l);
      // The enclosing function loses this one's lines after its first (the line that opens it stays the caller's too).
      for (const outer of inside ?? []) for (let l = line(node.getStart(source)) + 1; l <= line(node.getEnd()); l += 1) outer.delete(l);
      const name = (node as ts.FunctionLikeDeclaration).name?.getText(source) ?? `(function at line ${line(node.getStart(source)) + 1})`;
      out.push({ where: `${relative(root, join(root, path))}:${line(node.getStart(source)) + 1}`, name, own: 0 });
      const entry = out[out.length - 1];
      ts.forEachChild(node, (child) => visit(child, [...(inside ?? []), mine]));
      entry.own = mine.size;
      return;
    }
    ts.forEachChild(node, (child) => visit(child, inside));
  };
  visit(source, undefined);
  return out;
}

/** The lines of a file that are not blank (a comment is a line of the function it explains). */
function codeLinesOf(source: ts.SourceFile): Set<number> {
  const lines = new Set<number>();
  source.text.split('\n').forEach((text, line) => {
    if (text.trim() !== '') lines.add(line);
  });
  return lines;
}

function tooLong(): string[] {
  return ['src', 'activities', 'workflows']
    .flatMap((dir) => sourceFiles(dir, ['legacy']))
    .flatMap((path) => measure(path, readFileSync(join(root, path), 'utf8')))
    .filter((m) => m.own > LIMIT)
    .map((m) => `${m.where} ${m.name}: ${m.own} lines`);
}

describe('function length', () => {
  it('counts a function\'s own lines and comments, not its blank lines or nested functions', () => {
    const body = (n: number) => Array.from({ length: n }, (_, i) => `  const v${i} = ${i};`).join('\n');
    const text = [
      'export function outer() {',
      body(10),
      '  // a comment',
      '',
      '  return function inner() {',
      body(70),
      '  };',
      '}',
    ].join('\n');
    const measured = measure('planted.ts', text);
    expect(measured.map((m) => [m.name, m.own])).toEqual([
      ['outer', 14],
      ['inner', 72],
    ]);
  });

  it(`finds no function over ${LIMIT} lines of its own in src/, activities/ or workflows/`, () => {
    expect(tooLong()).toEqual([]);
  });
});
