/**
 * `objects: all` keeps a worker's memory bounded whatever the number of objects: preflight reads
 * the roles and extensions the dump's SQL names through PostgreSQL's parser, which runs in
 * WebAssembly, whose memory grows to the largest script it was given and never shrinks. Measured
 * on a real `ferry worker` process (its peak resident set, /proc/<pid>/status VmHWM) around the
 * preflight of 10,000 views: parsed as one script, the worker's peak rose 145 MB (and stayed
 * there for the rest of its life); in parts of PARSE_PART entries, about 50 MB.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { TestDatabases } from '../helpers/databases';
import { stackSuite } from '../helpers/suite';

/** One table and a view over it. */
const SMALL = `CREATE SCHEMA few; CREATE TABLE few.t (id int PRIMARY KEY, v text); CREATE VIEW few.v AS SELECT id, upper(v) AS v FROM few.t;`;

/** Ten thousand views over one table: 20,000 statements in the dump (each view, and its owner). */
async function manyViews(dbs: TestDatabases): Promise<void> {
  await dbs.exec('many', 'CREATE SCHEMA many; CREATE TABLE many.t (id int PRIMARY KEY, v text)');
  // 1,000 a transaction: each new view holds a lock until its transaction ends.
  for (let first = 1; first <= 10_000; first += 1000) {
    await dbs.exec(
      'many',
      `DO $$ BEGIN FOR i IN ${first}..${first + 999} LOOP
         EXECUTE format('CREATE VIEW many.v%s AS SELECT id, upper(v) AS v, length(v) AS n FROM many.t WHERE id > %s', i, i);
       END LOOP; END $$`,
    );
  }
}

/** A process's resident set now and at its peak, in MB (/proc/<pid>/status). */
function memory(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const mb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)![1]) / 1024;
  return { rss: mb('VmRSS'), peak: mb('VmHWM') };
}

describe('objects: all and the worker memory', () => {
  const suite = stackSuite({
    name: 'objmem',
    databases: { few: SMALL, many: '', target: '' },
    workers: 0,
    workerProcesses: ['objects-memory'],
    seed: manyViews,
    setUpTimeoutMs: 300_000,
  });

  it("plans 10,000 views' objects with the worker's peak memory under 80 MB above where it was", async () => {
    const { ferry, processes } = suite.stack;
    const pid = processes[0].process.pid!;
    // Warm: the parser loaded, the connections open, one small dump read (a preflight of its own).
    await ferry.preflight({ source: 'few', target: 'target', objects: 'all', tables: ['few.*'] }, 'objmem-warm');
    const before = memory(pid);
    writeFileSync(`/proc/${pid}/clear_refs`, '5'); // the peak starts again from now
    const plan = await ferry.preflight({ source: 'many', target: 'target', objects: 'all', tables: ['many.*'] }, 'objmem-many');
    expect(plan.objects!.kinds.VIEW).toBe(10_000);
    const after = memory(pid);
    expect(Math.round(after.peak - before.rss)).toBeLessThan(80);
  }, 300_000);
});
