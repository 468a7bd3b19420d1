/**
 * The parent workflow's view of a migration: its two state machines, per-table progress, the
 * event log (capped, so history stays small) and the status document built from them.
 */
import { migrationDetails } from '../../src/core/details';
import { displayQualified } from '../../src/core/identifiers';
import { TablePlan } from '../../src/core/plan';
import { migrationStateMachine, MigrationState, Phase, phaseMachine, StateMachine } from '../../src/core/state-machine';
import { Blocker, CutoverReport, TimelineStep, EventType, MigrationEvent, StatusDocument, TableStatus } from '../../src/core/status';
import { TableProgress } from '../definitions';
import { TrackerBase } from '../tracker-base';

export class Tracker extends TrackerBase<MigrationEvent> {
  readonly migration: StateMachine<MigrationState>;
  readonly phase = phaseMachine();
  readonly tables: TableStatus[] = [];
  cutover?: CutoverReport;
  /** Each server's `server_version_num`, from preflight's plan (absent in plans of an older Ferry). */
  servers?: { source: number; target: number };
  private readonly timeline: TimelineStep[] = [];
  /** While the cutover waits for write transactions begun before the freeze. */
  private blockers?: Blocker[];

  constructor(
    readonly id: string,
    readonly runId: string,
    readonly startedAt: string,
    initial: MigrationState = 'PENDING',
    /** Executions begun before PATCHES.progressByQuery upserted on every progress report. */
    private readonly upsertOnlyOnChange = false,
  ) {
    super();
    this.migration = migrationStateMachine(initial);
  }

  setState(to: MigrationState, reason?: string, at = this.now()): void {
    this.migration.to(to, at, reason);
    this.publish();
  }

  setPhase(to: Phase, reason?: string): void {
    if (this.phase.state === to) return;
    this.phase.to(to, this.now(), reason);
    this.publish();
  }

  event(type: EventType, table?: string, detail?: Record<string, unknown>): MigrationEvent {
    return this.append(type, table !== undefined ? { table } : {}, detail);
  }

  addTables(plans: TablePlan[]): void {
    for (const plan of plans) {
      this.tables[plan.index] = {
        source: displayQualified(plan.source),
        target: displayQualified(plan.target),
        phase: 'PENDING',
        rowsCopied: 0,
        rowsEstimated: plan.rowsEstimated,
        chunks: plan.chunks.map(() => ({ state: 'PENDING', rowsCopied: 0, checkpoint: null })),
      };
    }
  }

  applyProgress(p: TableProgress): void {
    const table = this.tables[p.tableIndex];
    if (!table) return;
    if (p.phase) table.phase = p.phase;
    if (p.lag) table.lag = p.lag;
    if (p.chunk) {
      const { index, ...chunk } = p.chunk;
      table.chunks[index] = chunk;
      table.rowsCopied = table.chunks.reduce((n, c) => n + c.rowsCopied, 0);
    }
    if (p.event) this.event(p.event.type, table.source, p.event.detail);
    for (const e of p.events ?? []) this.event(e.type, table.source, e.detail);
    this.publish();
  }

  /** The next step of the timeline begins (and the one before it ends); undefined ends the last. */
  step(name: TimelineStep['step'] | undefined): void {
    const now = this.now();
    const open = this.timeline[this.timeline.length - 1];
    if (open && !open.endedAt) {
      open.endedAt = now;
      open.ms = Math.max(0, Date.parse(now) - Date.parse(open.startedAt));
    }
    if (name) this.timeline.push({ step: name, startedAt: now });
  }

  /** Who the cutover waits for (undefined once it waits no more); shown in status and the Web UI. */
  setBlockers(blockers: Blocker[] | undefined): void {
    this.blockers = blockers?.length ? blockers : undefined;
    this.publish();
  }

  /** Online cutover done: the table workflows have returned, the parent finished each table. */
  completeTables(): void {
    for (const t of this.tables) t.phase = 'COMPLETED';
    this.publish();
  }

  protected refresh(): void {
    this.publish();
  }

  /** Search attributes and the Web UI's current details follow every change. */
  private publish(): void {
    this.upsertStatePhase(this.migration.state, this.phase.state, !this.upsertOnlyOnChange);
    this.renderDetails(() => migrationDetails(this.document(), this.blockers));
  }

  document(): StatusDocument {
    const doc: StatusDocument = {
      id: this.id,
      runId: this.runId,
      state: this.migration.state,
      phase: this.phase.state,
      paused: this.paused,
      tables: this.tables,
      events: this.events,
      transitions: [
        ...this.migration.transitions.map((t) => ({ machine: 'state' as const, ...t })),
        ...this.phase.transitions.map((t) => ({ machine: 'phase' as const, ...t })),
        ...this.controls,
      ].sort((a, b) => a.at.localeCompare(b.at)),
      startedAt: this.startedAt,
    };
    if (this.error) doc.error = this.error;
    if (this.endedAt) doc.endedAt = this.endedAt;
    if (this.dropped) doc.eventsDropped = this.dropped;
    if (this.warnings.length) doc.warnings = this.warnings;
    if (this.cutover) doc.cutover = this.cutover;
    if (this.blockers) doc.cutoverBlockers = this.blockers;
    if (this.timeline.length) doc.timeline = this.timeline;
    if (this.eventStream) doc.eventStream = this.eventStream;
    if (this.servers) {
      doc.source = { serverVersion: this.servers.source };
      doc.target = { serverVersion: this.servers.target };
    }
    return doc;
  }
}
