/** `ferry events [ID] [--type T]… [--follow] [--since DURATION|SEQ] [--json]`: the event stream, read back. */
import { Command, InvalidArgumentError, Option } from 'commander';
import { streamEvents, StreamedEvent } from '../client/events';
import { CHANGE_EVENT_TYPES } from '../core/change-status';
import { parseDuration } from '../core/duration';
import { EVENT_TYPES } from '../core/status';
import { NATS_URL_ENV } from '../core/event-subjects';
import { CliExit } from './output';

const KNOWN_TYPES = [...new Set<string>([...EVENT_TYPES, ...CHANGE_EVENT_TYPES])].sort();

function eventType(value: string, previous: string[] = []): string[] {
  if (!KNOWN_TYPES.includes(value)) throw new InvalidArgumentError(`is not an event type; one of ${KNOWN_TYPES.join(', ')}`);
  return [...previous, value];
}

/** A duration back from now (30m, 2h) or a sequence number (the run's event seq with an ID, the stream's without). */
function since(value: string): { seq: number } | { time: Date } {
  if (/^\d+$/.test(value)) return { seq: Number(value) };
  const ms = parseDuration(value);
  if (ms === undefined) throw new InvalidArgumentError('must be a duration back from now (30m, 2h, 7d) or a sequence number');
  return { time: new Date(Date.now() - ms) };
}

export function registerEventsCommand(program: Command): void {
  program
    .command('events')
    .description(`read Ferry's events back from the NATS JetStream stream FERRY_EVENTS (${NATS_URL_ENV}): one run's or every run's, replayed, then live with --follow`)
    .argument('[id]', 'a migration or change plan (all runs when absent)')
    .addOption(new Option('--type <type>', 'only events of this type (repeat for more)').argParser(eventType))
    .addOption(new Option('--since <duration|seq>', "from this long ago (30m, 2h), or from this sequence number on (the run's event seq with an ID, the stream's without)").argParser(since))
    .addOption(new Option('--follow', 'keep reading as events arrive, until Ctrl-C'))
    .addOption(new Option('--json', 'one event document per line'))
    .action(eventsCommand);
}

async function eventsCommand(id: string | undefined, opts: { type?: string[]; since?: { seq: number } | { time: Date }; follow?: boolean; json?: boolean }): Promise<void> {
  if (!process.env[NATS_URL_ENV]) throw new CliExit(`${NATS_URL_ENV} is not set: set it to the NATS servers the workers publish to (nats://host:4222)`, 2);
  const abort = new AbortController();
  process.once('SIGINT', () => abort.abort());
  const from = opts.since && 'seq' in opts.since ? { sinceSeq: opts.since.seq } : opts.since ? { sinceTime: opts.since.time } : {};
  for await (const event of streamEvents({ ...(id ? { id } : {}), ...(opts.type ? { types: opts.type } : {}), ...from, follow: opts.follow === true, signal: abort.signal })) {
    process.stdout.write(`${opts.json ? JSON.stringify(event) : eventLine(event)}\n`);
  }
}

function eventLine(e: StreamedEvent): string {
  const place = e.table ? ` ${e.table}` : e.step !== undefined ? ` step ${e.step + 1}` : '';
  return `${e.at}  ${e.kind} ${e.id} #${e.seq}  ${e.type}${place}${e.detail ? `  ${JSON.stringify(e.detail)}` : ''}`;
}
