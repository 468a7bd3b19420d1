/**
 * Row values stay on the workers (issue 12). PostgreSQL puts them in its errors — in a message
 * (`invalid input syntax for type integer: "…"`), in `detail` (`Failing row contains (…)`,
 * `Key (email)=(…) already exists`), in `where` (`COPY t, line 3, column v: "…"`) — and
 * failures go into workflow histories and the workers' logs. Migrations fail, for good or for
 * a while, on a row that holds a recognisable value; every history of each (migration, table
 * child, preflight) and every log line of the worker are searched for it, while the SQLSTATE and
 * the names PostgreSQL reported must be there.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import pino from 'pino';
import { hitsIn, historiesText } from '../helpers/history';
import { eventually, resultWithin } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const TYPE_LEAK = `zq-${randomBytes(8).toString('hex')}-pin`;
const CHECK_LEAK = `zq-${randomBytes(8).toString('hex')}-note`;
const RAISE_LEAK = `zq-${randomBytes(8).toString('hex')}-raised`;

describe('row values in failures', () => {
  const logLines: string[] = [];

  const suite = stackSuite({
    name: 'rowdata',
    databases: {
      source: `CREATE TABLE public.vault_pins (id int PRIMARY KEY, pin text NOT NULL);
       INSERT INTO public.vault_pins SELECT g, (1000 + g)::text FROM generate_series(1, 300) g;
       UPDATE public.vault_pins SET pin = '${TYPE_LEAK}' WHERE id = 150;
       CREATE TABLE public.vault_notes (id int PRIMARY KEY, note text NOT NULL, v int);
       INSERT INTO public.vault_notes SELECT g, 'note ' || g, g FROM generate_series(1, 300) g;
       UPDATE public.vault_notes SET note = '${CHECK_LEAK}', v = -1 WHERE id = 150;
       ALTER TABLE public.vault_notes ADD CONSTRAINT vault_notes_v_positive CHECK (v > 0) NOT VALID;
       CREATE TABLE public.vault_raised (id int PRIMARY KEY, note text NOT NULL);
       INSERT INTO public.vault_raised SELECT g, 'note ' || g FROM generate_series(1, 300) g;
       UPDATE public.vault_raised SET note = '${RAISE_LEAK}' WHERE id = 150;
       ANALYZE;`,
      target: [
        // The target reads each pin as an integer (a trigger of the application's: preflight refuses a
        // column that cannot take the source's values, so the cast is the trigger's): the copy fails
        // on the one row that is not, with PostgreSQL quoting the value.
        `CREATE TABLE public.vault_pins (id int PRIMARY KEY, pin text);
       CREATE FUNCTION public.pin_as_integer() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM NEW.pin::integer; RETURN NEW; END $$;
       CREATE TRIGGER pin_as_integer BEFORE INSERT ON public.vault_pins FOR EACH ROW EXECUTE FUNCTION public.pin_as_integer();
       ALTER TABLE public.vault_pins ENABLE ALWAYS TRIGGER pin_as_integer;`,
        // A trigger of the application's on the target that quotes the row in what it raises
        // (P0001, retried: the class is not one no retry can fix); ALWAYS, so it fires whatever role the session has.
        `CREATE TABLE public.vault_raised (id int PRIMARY KEY, note text NOT NULL);
       CREATE FUNCTION public.refuse_zq() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.note LIKE 'zq-%' THEN RAISE EXCEPTION 'refused note %', NEW.note; END IF;
         RETURN NEW;
       END $$;
       CREATE TRIGGER refuse_zq BEFORE INSERT ON public.vault_raised FOR EACH ROW EXECUTE FUNCTION public.refuse_zq();
       ALTER TABLE public.vault_raised ENABLE ALWAYS TRIGGER refuse_zq;`,
      ].join('\n'),
    },
    connections: { src: 'source', dst: 'target' },
    workers: 0,
    ready: async (s) => {
      // The worker logs as `ferry worker` does (pino JSON), into memory.
      const sink = new Writable({
        write(chunk: Buffer, _encoding, done) {
          logLines.push(chunk.toString('utf8'));
          done();
        },
      });
      await s.stack.startWorker({ logger: pino({ level: 'debug' }, sink) });
    },
  });

  it('keeps a value PostgreSQL quotes in its message (a cast on the target) out of every history and log line', async () => {
    const id = `rowdata-type-${randomBytes(3).toString('hex')}`;
    await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.vault_pins'] }, { id });
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('PostgresError.22P02');
    expect(result.error?.cause).toMatch(/invalid input syntax for type integer/);

    const { types, text } = await historiesText(suite.stack.client, id, 3);
    expect(types).toEqual(['migrationWorkflow', 'preflightWorkflow', 'tableMigrationWorkflow']);
    // What is meant to be there is there, so the search below reads real failures.
    expect(text).toContain('PostgresError.22P02');
    expect(text).toContain('invalid input syntax for type integer');
    expect(hitsIn(text, { 'row value': TYPE_LEAK })).toEqual([]);

    const logs = logLines.join('');
    expect(logs).toContain('22P02');
    expect(hitsIn(logs, { 'row value': TYPE_LEAK })).toEqual([]);
  });

  it('keeps a failing row (a CHECK the row violates) out of every history and log line, while the SQLSTATE and the constraint are named', async () => {
    const id = `rowdata-check-${randomBytes(3).toString('hex')}`;
    await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.vault_notes'] }, { id });
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('FAILED');
    expect(result.error?.type).toBe('PostgresError.23514');
    expect(result.error?.cause).toMatch(/violates check constraint "vault_notes_v_positive"/);

    const { types, text } = await historiesText(suite.stack.client, id, 3);
    expect(types).toEqual(['migrationWorkflow', 'preflightWorkflow', 'tableMigrationWorkflow']);
    expect(text).toContain('PostgresError.23514');
    expect(text).toContain('vault_notes_v_positive');
    expect(hitsIn(text, { 'row value': CHECK_LEAK })).toEqual([]);

    const logs = logLines.join('');
    expect(logs).toContain('vault_notes_v_positive');
    expect(hitsIn(logs, { 'row value': CHECK_LEAK })).toEqual([]);
  });

  it('keeps a value a target trigger raises out of RETRYING and of the retried attempt in the history', async () => {
    const id = `rowdata-raised-${randomBytes(3).toString('hex')}`;
    await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.vault_raised'] }, { id });
    const retrying = await eventually(async () => (await suite.stack.ferry.status(id)).retrying, 30_000);
    expect(retrying).toMatchObject({ activity: 'copyChunk' });
    expect(retrying.lastError).toMatch(/raised by a trigger or function/);
    expect(retrying.lastError).not.toContain(RAISE_LEAK);
    // The application relents: the next attempt copies, and the history records the attempt before it.
    await suite.dbs.exec('target', 'DROP TRIGGER refuse_zq ON public.vault_raised');
    const result = await resultWithin(suite.stack.ferry, id);
    expect(result.state).toBe('SUCCEEDED');

    const { text } = await historiesText(suite.stack.client, id, 3);
    expect(text).toContain('PostgresError.P0001');
    expect(hitsIn(text, { 'row value': RAISE_LEAK })).toEqual([]);
    expect(hitsIn(logLines.join(''), { 'row value': RAISE_LEAK })).toEqual([]);
  });
});
