/**
 * The position the logical consumer confirms to its slot, against a real slot on a private
 * wal_level=logical cluster: a transaction whose commit record begins exactly where the confirmed
 * one's ends must still be streamed after the consumer reconnects. PostgreSQL resumes with the
 * transactions whose commit record begins at or after the slot's confirmed position, so a
 * position one byte past a commit's end skips such a neighbour for good.
 */
import { Client } from 'pg';
import { LogicalReplicationService, Pgoutput, PgoutputPlugin } from 'pg-logical-replication';
import { confirmPosition } from '../../activities/stream-changes';
import { LogicalCluster, startLogicalCluster } from '../helpers/logical-cluster';
import { eventually } from '../helpers/stack';

let cluster: LogicalCluster;
let admin: Client;

beforeAll(async () => {
  cluster = await startLogicalCluster();
  admin = new Client({ connectionString: cluster.url });
  await admin.connect();
  await admin.query('CREATE TABLE t (id int PRIMARY KEY)');
  await admin.query('CREATE PUBLICATION slot_position_pub FOR TABLE t');
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await cluster?.stop();
});

interface Commit {
  commitLsn: string;
  commitEndLsn: string;
  ids: number[];
}

/** Streams the slot until `until` holds for the commits seen, confirming nothing unless `confirm` says so; then stops. */
async function stream(slot: string, until: (commits: Commit[]) => boolean, onCommit: (service: LogicalReplicationService, commit: Commit) => Promise<void> = async () => undefined): Promise<Commit[]> {
  const service = new LogicalReplicationService({ connectionString: cluster.url }, { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: true } });
  const commits: Commit[] = [];
  let ids: number[] = [];
  service.on('data', async (_lsn: string, message: Pgoutput.Message) => {
    if (message.tag === 'begin') ids = [];
    if (message.tag === 'insert') ids.push(Number(message.new.id));
    if (message.tag === 'commit') {
      const commit = { commitLsn: message.commitLsn!, commitEndLsn: message.commitEndLsn!, ids };
      commits.push(commit);
      await onCommit(service, commit);
    }
  });
  const plugin = new PgoutputPlugin({ protoVersion: 1, publicationNames: ['slot_position_pub'] });
  const streaming = service.subscribe(plugin, slot).catch(() => undefined);
  try {
    await eventually(async () => until(commits), 20_000);
  } finally {
    await service.stop();
    await streaming;
  }
  return commits;
}

/** Drops the slot once the walsender of the stream just stopped has let go of it. */
async function dropSlot(slot: string): Promise<void> {
  await eventually(async () => (await admin.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND NOT active', [slot])).rowCount === 1, 10_000);
  await admin.query('SELECT pg_drop_replication_slot($1)', [slot]);
}

/** An LSN's byte position (the library writes its halves zero-padded, the server does not). */
function lsnValue(lsn: string): bigint {
  const [high, low] = lsn.split('/');
  return (BigInt(`0x${high}`) << 32n) + BigInt(`0x${low}`);
}

/** The slot's confirmed position as the server holds it. */
async function confirmedFlush(slot: string): Promise<string> {
  const { rows } = await admin.query('SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1', [slot]);
  return rows[0].lsn;
}

it('streams the neighbouring transaction again after a reconnect when the confirmed commit ends where its commit begins', async () => {
  // Two transactions whose commit records are adjacent in the WAL: T2 writes first and stays
  // open, T1 writes and commits, T2 commits at once. Anything else writing WAL in between (a
  // checkpoint's running-xacts record) separates them, so the set-up is tried a few times.
  for (let round = 0; round < 10; round += 1) {
    const slot = `slot_position_${round}`;
    await admin.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [slot]);
    const t2 = new Client({ connectionString: cluster.url });
    await t2.connect();
    try {
      const base = round * 10;
      await t2.query('BEGIN');
      await t2.query('INSERT INTO t VALUES ($1)', [base + 2]);
      await admin.query('INSERT INTO t VALUES ($1)', [base + 1]);
      await t2.query('COMMIT');
    } finally {
      await t2.end();
    }
    const initial = await confirmedFlush(slot);
    // First connection: confirm T1 only, as the consumer does once T1's keys are committed.
    let confirmed: string | undefined;
    const first = await stream(
      slot,
      (commits) => commits.length >= 2,
      async (service, commit) => {
        if (commit.ids.includes(round * 10 + 1)) {
          await confirmPosition(service, commit.commitEndLsn);
          confirmed = commit.commitEndLsn;
        }
      },
    );
    const [c1, c2] = first;
    expect(c1.ids).toEqual([round * 10 + 1]);
    expect(c2.ids).toEqual([round * 10 + 2]);
    if (c2.commitLsn !== c1.commitEndLsn) {
      await dropSlot(slot);
      continue;
    }
    // The server holds the confirmed position: exactly the end of T1's commit.
    await eventually(async () => (await confirmedFlush(slot)) !== initial, 10_000);
    expect(lsnValue(await confirmedFlush(slot))).toBe(lsnValue(confirmed!));
    // Second connection, from the slot's position: T2 is not lost.
    const second = await stream(slot, (commits) => commits.length >= 1);
    expect(second[0].ids).toEqual([round * 10 + 2]);
    await dropSlot(slot);
    return;
  }
  throw new Error('could not make two adjacent commit records in 10 rounds');
}, 120_000);

it('hands the library the byte before the position, borrowing across the halves of an LSN', async () => {
  const sent: string[] = [];
  const service = { acknowledge: async (lsn: string) => sent.push(lsn) } as unknown as LogicalReplicationService;
  await confirmPosition(service, '00000000/01534318');
  await confirmPosition(service, '2/0');
  await confirmPosition(service, 'A/1B');
  expect(sent).toEqual(['0/1534317', '1/FFFFFFFF', 'A/1A']);
});
