/**
 * The layers of docs/architecture.md's code map, read from the import statements of activities/,
 * workflows/ and src/: no import circles (type imports count: they tie the modules' shapes), no
 * activity importing another (shared SQL lives in src/db), src/ taking no value from workflows/
 * or activities/ but in the worker (the composition root), nothing but the CLI and src/dev itself
 * reaching into src/dev. What breaks a rule today is listed below with why, to shrink: a new
 * break fails, and so does a listed one that is gone (delete its line). Moved down a layer so
 * far: the freeze's removal and capture's install (src/db/freeze.ts, capture-install.ts), the
 * rewrite's rehearsal and log apply (src/db/rewrite-data.ts), index builds (src/db/index-build.ts),
 * sequence positions (src/db/sequences.ts), the signals (src/core/signals.ts); and telemetry no longer
 * reads activities' results (they count what they did through ActivityDeps.metrics).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { ROOT, sourceFiles } from '../helpers/source-files';

const root = ROOT;

/** Known breaks, `from -> to`, each to be mended by moving shared code down a layer. */
const KNOWN: Record<string, string> = {
};
/** Known circles, each as its sorted members joined by ' + '. */
const KNOWN_CIRCLES: Record<string, string> = {
};


interface Edge {
  from: string;
  to: string;
  typeOnly: boolean;
}

function edges(): Edge[] {
  const out: Edge[] = [];
  const statement = /^(?:import|export)\s+(type\s+)?[^;]*?\sfrom\s+'(\.[^']+)'/gm;
  for (const from of ['activities', 'workflows', 'src'].flatMap((dir) => sourceFiles(dir))) {
    const text = readFileSync(join(root, from), 'utf8');
    for (const m of text.matchAll(statement)) {
      const base = normalize(join(dirname(from), m[2]));
      const to = [`${base}.ts`, join(base, 'index.ts')].find((c) => existsSync(join(root, c))) ?? base;
      out.push({ from, to: relative('.', to), typeOnly: Boolean(m[1]) });
    }
  }
  return out;
}

/** Strongly connected components of more than one module (Tarjan). */
function circles(all: Edge[]): string[] {
  const next = new Map<string, string[]>();
  for (const e of all) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const members: string[] = [];
    for (let w = stack.pop()!; ; w = stack.pop()!) {
      members.push(w);
      if (w === v) break;
    }
    if (members.length > 1) found.push(members.sort().join(' + '));
  };
  for (const v of next.keys()) if (!index.has(v)) visit(v);
  return found.sort();
}

function breaks(all: Edge[]): string[] {
  const out = new Set<string>();
  for (const { from, to, typeOnly } of all) {
    const edge = `${from} -> ${to}`;
    // An activity module imports no other, but its own helpers (deps, classified, callback's
    // target checks) and its own folder; the registry (index.ts) imports them all.
    if (from.startsWith('activities/') && to.startsWith('activities/') && from !== 'activities/index.ts') {
      const helper = ['activities/deps.ts', 'activities/classified.ts', 'activities/callback-target.ts'].includes(to);
      const ownFolder = dirname(from) !== 'activities' && dirname(from) === dirname(to);
      const toOwnFolder = dirname(to) !== 'activities' && dirname(to) === join('activities', from.slice('activities/'.length).replace(/\.ts$/, '').replace('change-preflight', 'change-checks'));
      if (!helper && !ownFolder && !toOwnFolder) out.add(edge);
    }
    if (from.startsWith('src/') && from !== 'src/worker.ts' && !typeOnly && (to.startsWith('workflows/') || to.startsWith('activities/'))) out.add(edge);
    if (to.startsWith('src/dev/') && !from.startsWith('src/dev/') && !from.startsWith('src/cli/') && !typeOnly) out.add(edge);
    // Code kept for old histories is reached only where old executions branch to it: the activity
    // registry, and the workflows that choose between the old path and the new.
    if (to.startsWith('activities/legacy/') && !from.startsWith('activities/legacy/') && from !== 'activities/index.ts' && !typeOnly) out.add(edge);
    if (to.startsWith('workflows/legacy/') && !from.startsWith('workflows/')) out.add(edge);
  }
  return [...out].sort();
}

describe("the code map's layers", () => {
  const all = edges();

  it('reads the imports (the check itself can see an edge)', () => {
    expect(all).toContainEqual({ from: 'workflows/change/change.ts', to: 'workflows/change/context.ts', typeOnly: false });
    expect(all.length).toBeGreaterThan(500);
  });

  it('has no import circle but the known ones', () => {
    expect(circles(all)).toEqual(Object.keys(KNOWN_CIRCLES).sort());
  });

  it('keeps activities apart, src/ below workflows and activities, and src/dev to the CLI, but the known breaks', () => {
    expect(breaks(all)).toEqual(Object.keys(KNOWN).sort());
  });

  it('finds a new break: live code importing legacy code', () => {
    const planted = [...all, { from: 'activities/foreign-keys.ts', to: 'activities/legacy/finalize-target.ts', typeOnly: false }];
    expect(breaks(planted)).toContain('activities/foreign-keys.ts -> activities/legacy/finalize-target.ts');
  });

  it('finds a new break: an activity importing another', () => {
    const planted = [...all, { from: 'activities/backfill.ts', to: 'activities/freeze.ts', typeOnly: false }];
    expect(breaks(planted)).toContain('activities/backfill.ts -> activities/freeze.ts');
    expect(circles([...all, { from: 'src/db/freeze.ts', to: 'activities/freeze.ts', typeOnly: true }])).toContain('activities/freeze.ts + src/db/freeze.ts');
  });
});
