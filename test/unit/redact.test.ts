/**
 * PostgreSQL errors as they may leave a worker (issue 12): the SQLSTATE, the names PostgreSQL
 * reported and the message's fixed part; never a value, however it is quoted, and never
 * `detail` or `where`.
 */
import { PostgresError, redacted, redactedMessage, redactedRetryable } from '../../src/db/redact';

const pg = (code: string, message: string, fields: Record<string, string> = {}) => ({ severity: 'ERROR', code, message, ...fields });

describe('redacted PostgreSQL errors', () => {
  it.each([
    [pg('22P02', 'invalid input syntax for type integer: "zq-1"'), 'invalid input syntax for type integer: "…"'],
    [pg('22P02', 'invalid input syntax for type integer: "a"b" c"'), 'invalid input syntax for type integer: "…"'],
    [pg('22P02', 'invalid input syntax for type integer: "unclosed'), 'invalid input syntax for type integer: "…"'],
    [pg('22003', 'value "123456789012" is out of range for type integer'), 'value "…" is out of range for type integer'],
    [pg('22P02', 'invalid input value for enum mood: "zq-2"'), 'invalid input value for enum mood: "…"'],
    [pg('22021', 'invalid byte sequence for encoding "UTF8": 0xe2 0x28'), 'invalid byte sequence for encoding "…": 0x… 0x…'],
    [pg('22007', "invalid value for parameter 'x': 'zq-3'"), "invalid value for parameter '…'"],
    [
      pg('23514', 'new row for relation "vault" violates check constraint "vault_v_positive"', { schema: 'public', table: 'vault', constraint: 'vault_v_positive' }),
      'new row for relation "vault" violates check constraint "vault_v_positive"',
    ],
    [pg('23505', 'duplicate key value violates unique constraint "vault_email_key"', { constraint: 'vault_email_key' }), 'duplicate key value violates unique constraint "vault_email_key"'],
    [
      pg('23502', 'null value in column "email" of relation "vault" violates not-null constraint', { table: 'vault', column: 'email' }),
      'null value in column "email" of relation "vault" violates not-null constraint',
    ],
    [pg('23505', 'Key (email)=(zq@example.com) already exists'), 'Key (email)=(…) already exists'],
    [pg('23503', 'Key (a, b)=(1, (2)) is not present in table "t"', { table: 't' }), 'Key (a, b)=(…) is not present in table "t"'],
    [pg('42P01', 'relation "public.missing" does not exist'), 'relation "public.missing" does not exist'],
    [pg('P0001', 'bad email zq-4@example.com'), 'raised by a trigger or function (its text may quote row values, so it is not passed on)'],
    [pg('57P01', 'terminating connection due to administrator command'), 'terminating connection due to administrator command'],
  ])('%o reads %s', (err, expected) => {
    expect(redactedMessage(err)).toBe(expected);
  });

  it('keeps the SQLSTATE and the names, and nothing of detail or where', () => {
    const err = {
      ...pg('23514', 'new row for relation "vault" violates check constraint "vault_v_positive"', { schema: 'public', table: 'vault', constraint: 'vault_v_positive' }),
      detail: 'Failing row contains (150, zq-5, -1).',
      where: 'COPY vault, line 1: "150\tzq-5\t-1"',
    } as Parameters<typeof redacted>[0];
    const cause = redacted(err);
    expect(cause).toBeInstanceOf(PostgresError);
    expect({ ...cause }).toEqual({ name: 'PostgresError', sqlState: '23514', schema: 'public', table: 'vault', constraint: 'vault_v_positive' });
    expect(`${cause.message} ${cause.stack}`).not.toContain('zq-5');

    const retryable = redactedRetryable(err);
    expect([retryable.type, retryable.nonRetryable, retryable.message]).toEqual(['PostgresError.23514', false, cause.message]);
    expect(retryable.details).toEqual([{ sqlState: '23514', schema: 'public', table: 'vault', constraint: 'vault_v_positive' }]);
    expect(JSON.stringify({ ...retryable, stack: retryable.stack })).not.toContain('zq-5');
  });
});
