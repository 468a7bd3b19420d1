/**
 * The event stream's names (src/event-stream.ts): the stream, its subjects and the event as it
 * carries it. Pure module: workflows use it.
 */
export const EVENTS_STREAM = 'FERRY_EVENTS';
/** Messages that act on runs from outside (`ferry.control.<id>.approve`), kept for the workers to read. */
export const CONTROL_STREAM = 'FERRY_CONTROL';

/** The subject an approval message for run `id` goes to. */
export function approvalSubject(id: string): string {
  return `ferry.control.${subjectToken(id)}.approve`;
}

/** The NATS servers workers publish to and clients read from. */
export const NATS_URL_ENV = 'FERRY_NATS_URL';
export type EventKind = 'migration' | 'change';

/** An event as the stream carries it: the status document's event, with its run's id and kind. */
export interface StreamedEvent {
  id: string;
  kind: EventKind;
  seq: number;
  type: string;
  at: string;
  table?: string;
  step?: number;
  detail?: Record<string, unknown>;
  /** The stream's own sequence number (set when read back). */
  streamSeq?: number;
}

/** Where a run's events go, as its status says. */
export interface EventStreamWhere {
  stream: string;
  subjects: string;
}

/** An event as a run's tracker has it: the stream's, before its run's id and kind are added. */
export type RunEvent = Omit<StreamedEvent, 'id' | 'kind'>;

/** A subject token for an id: NATS splits subjects at dots. */
export function subjectToken(id: string): string {
  return id.replace(/%/g, '%25').replace(/\./g, '%2E');
}

export function eventSubject(kind: EventKind, id: string, type: string): string {
  return `ferry.${kind}.${subjectToken(id)}.${type}`;
}

/** The subjects one run's events go to, for people and for `ferry status`. */
export function runSubjects(kind: EventKind, id: string): string {
  return `ferry.${kind}.${subjectToken(id)}.<EventType>`;
}
