/**
 * Replays every recorded history (test/fixtures/histories, see its README) against the current
 * workflow code, with the bundle and data converter a Ferry worker uses: a change that would
 * break migrations already running in production fails here with a DeterminismViolationError,
 * naming the file. Guard such a change with patched(); do not re-record.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import type { temporal } from '@temporalio/proto';
import { DefaultLogger, ReplayWorkerOptions, Runtime, Worker } from '@temporalio/worker';
import { dataConverterFromEnv } from '../../src/codec';
import { CHANGE_PREFLIGHT_WORKFLOW, CHANGE_WORKFLOW, CLEANUP_WORKFLOW, HELPER_WORKFLOW_TYPES, MIGRATION_WORKFLOW, PREFLIGHT_WORKFLOW, TABLE_WORKFLOW, UNFREEZE_WORKFLOW } from '../../src/core/names';
import { workflowBundle } from '../../src/temporal/bundle';

type History = temporal.api.history.v1.IHistory;

const DIR = join(__dirname, '..', 'fixtures', 'histories');

/**
 * How each scenario's migrationWorkflow (or, for `change: true`, its changeWorkflow) must have
 * ended: completed, or failed with this type.
 */
/** `noTableWorkflows`: every table went in a group (copySmallTables), so no table workflow ran. */
const SCENARIOS: Record<string, { failureType?: string; change?: boolean; runs?: number; noTableWorkflows?: boolean }> = {
  full: {},
  online: {},
  cancelled: { failureType: 'MigrationCancelled' },
  'rolled-back': { failureType: 'MigrationFailed' },
  'continued-as-new': {},
  'timed-out': { failureType: 'MigrationTimedOut' },
  // Two tables under one rate cap, re-shared when the smaller finishes copying: the history
  // carries the share-rate-cap-across-tables patch marker and the control signals it sent.
  throttled: {},
  // Recorded with the workflow code of commit ae2e2ee (the last landed before control changes
  // interrupted copy slices): a throttle change while copy slices run, pause, resume, cancel.
  // It replays only because the new behaviour is behind patched('interrupt-slices-on-control')
  // (without the patch it fails: checked when the guard was added), and likewise only because
  // re-sharing the rate cap is behind patched('share-rate-cap-across-tables') (checked too).
  'landed-ae2e2ee-cancelled': { failureType: 'MigrationCancelled' },
  // Recorded after patched('target-ready-before-cutover'): indexes per table, foreign keys
  // before the approval; online, the armed freeze, a blocked cutover ended by onBlocked:
  // terminate, and the background cleanup helper (cleanupWorkflow) after a long reader.
  'full-indexes-per-table': {},
  'online-armed-freeze': {},
  // Paused and resumed back to back while the tables wait: numbered control signals (delivered
  // out of order, some of them) and waits cut short by them, behind patched('sequenced-control').
  'online-paused': {},
  // cutover.switch: PgBouncer paused before the freeze, repointed before the point of no return,
  // resumed after it; and a webhook switcher refusing `switched`, rolled back and told `reverted`.
  'online-switch-pgbouncer': {},
  'online-switch-webhook-refused': { failureType: 'MigrationFailed' },
  // Events on the NATS stream (patch event-stream), approval: event by a signed message, and the
  // run ending while NATS was down: its last events handed to eventPublisherWorkflow (patch
  // detached-event-publisher).
  'online-event-stream': {},
  // The cutover's drain taking the tables' syncs over (drainTables, its first slice of each
  // sealing it) without waiting for their workflows to end, whose dirty-key re-checks ran under
  // their sync fence; the tables awaited past the point of no return (patch sealed-drain).
  'online-sealed-drain': {},
  // A worker of one activity slot: a ready table's slice that waited for it behind the other
  // table's dwell found it crowded and did not dwell; the table paused off the slot (patch crowded-sync).
  'online-crowded-sync': {},
  'online-cutover-queue': {},
  // Tables declared ready syncing and re-checking on the ready task queue (patch ready-queue),
  // small tables copying four to a parallelism.tables slot (patch online-small-tables-share-slots).
  'online-ready-queue': {},
  // capture: logical on a private wal_level=logical cluster: the slot consumer beside the tables
  // and the cutover's wait for it, behind patched('logical-capture').
  'online-logical': {},
  // The same after patched('consumer-stop-outside-outage'): the consumer's stop is awaited past
  // the point of no return instead of inside the write outage.
  'online-logical-stop-after': {},
  // Milestones batched into fewer signals, indexes listed beside the primary key build, behind
  // patched('batched-reports'); full mode, FULL_MIGRATING marked by the parent, behind
  // patched('parent-marks-copying').
  'full-batched-reports': {},
  'online-batched-reports': {},
  // Ready tables whose sync activity keeps polling while writes arrive (busyDwellMs), behind
  // patched('busy-sync-dwell'); approved while the application writes.
  'online-busy-dwell': {},
  // Small tables finished by their copy activity (key, indexes, ANALYZE), behind
  // patched('small-table-in-one-step').
  'full-small-tables': {},
  'full-batches-by-bytes': {},
  'full-validated-whole': {},
  // A table validated by its sides' sums over shares of blocks, behind patched('block-validation').
  'full-validated-blocks': {},
  // Small tables that send no signal: their milestones come back in their results, behind
  // patched('small-table-reports-in-result').
  'full-small-tables-held': {},
  // Many small tables copied in groups, one activity of the parent's each, behind
  // patched('small-table-groups').
  'full-small-table-groups': { noTableWorkflows: true },
  // More than a plan page of tables: the plan stored on the target, loaded in pages (planTables).
  'full-stored-plan': { noTableWorkflows: true },
  // Recorded under the callback.secret rule before FERRY_SECRET_* names (any variable name, here
  // HOOK_SECRET), which the spec now refuses: it replays only because executions without the
  // ferry-secret-names patch marker keep the old rule (workflows/migration/spec-input.ts).
  'before-ferry-secret-names': {},
  // Change plans: a plan with a paused and re-throttled backfill, an index, a safe SET NOT NULL
  // and a validation; and one whose VALIDATE fails and rolls back.
  change: { change: true },
  'change-rolled-back': { change: true, failureType: 'ChangeFailed' },
  // Control signals with their actor and reason, behind the audited-change-controls patch marker.
  'change-audited': { change: true, failureType: 'ChangeCancelled' },
  // A rewrite swapped back by `ferry revert` within keepOld (revertible-rewrite).
  'rewrite-reverted': { change: true },
  // A backfill that continued as new once (change-continue-as-new): two runs of the change plan.
  'change-continued-as-new': { change: true, runs: 2 },
  // A cancelled rewrite, then `ferry cleanup` (changeCleanupWorkflow).
  'change-cleaned-up': { change: true, failureType: 'ChangeCancelled' },
  // A rewrite step: shadow copy, approval, swap, and the helper that drops the old table after keepOld.
  rewrite: { change: true },
};

/** One line of a scenario's manifest.json (written by scripts/record-histories.ts). */
interface Entry {
  file: string;
  workflowType: string;
  workflowId: string;
  runId: string;
  status: string;
}

interface Fixture extends Entry {
  scenario: string;
}

function manifest(scenario: string): Fixture[] {
  const file = join(DIR, scenario, 'manifest.json');
  if (!existsSync(file)) return [];
  return (JSON.parse(readFileSync(file, 'utf8')) as { executions: Entry[] }).executions.map((e) => ({ ...e, scenario }));
}

function history(f: Fixture): History {
  return historyFromJSON(JSON.parse(readFileSync(join(DIR, f.scenario, f.file), 'utf8')));
}

/**
 * As createFerryWorker (src/worker.ts) configures the workflow side: the cached bundle (or
 * FERRY_WORKFLOW_BUNDLE) and the env's payload codec. It adds no workflow interceptors or sinks
 * (its audit interceptor is for activities, which replay never runs), so neither does this.
 */
function replayOptions(): ReplayWorkerOptions {
  const options: ReplayWorkerOptions = { workflowBundle: workflowBundle() };
  const dataConverter = dataConverterFromEnv(process.env);
  if (dataConverter) options.dataConverter = dataConverter;
  return options;
}

describe('recorded workflow histories', () => {
  const fixtures = new Map(Object.keys(SCENARIOS).map((s) => [s, manifest(s)]));
  let options: ReplayWorkerOptions;

  beforeAll(() => {
    try {
      Runtime.install({ logger: new DefaultLogger('ERROR') });
    } catch {
      // already installed in this process
    }
    options = replayOptions();
  });

  it('cover every scenario and every workflow type, and each manifest matches its directory', () => {
    expect(readdirSync(DIR, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort()).toEqual(Object.keys(SCENARIOS).sort());
    for (const [scenario, list] of fixtures) {
      const files = readdirSync(join(DIR, scenario)).filter((f) => f.endsWith('.json') && f !== 'manifest.json');
      expect({ scenario, files: list.map((f) => f.file).sort() }).toEqual({ scenario, files: files.sort() });
      const types = list.map((f) => f.workflowType);
      const main = SCENARIOS[scenario].change ? CHANGE_WORKFLOW : MIGRATION_WORKFLOW;
      expect({ scenario, main: types.filter((t) => t === main).length }).toEqual({ scenario, main: SCENARIOS[scenario].runs ?? 1 });
      expect({ scenario, types: [...new Set(types)].sort() }).toEqual({
        scenario,
        types: expect.arrayContaining(
          SCENARIOS[scenario].change
            ? [CHANGE_WORKFLOW, CHANGE_PREFLIGHT_WORKFLOW]
            : [MIGRATION_WORKFLOW, ...(SCENARIOS[scenario].noTableWorkflows ? [] : [TABLE_WORKFLOW]), PREFLIGHT_WORKFLOW],
        ),
      });

      // The migration ended the way the scenario says, so the fixture is the story it claims.
      const events = history(list.find((f) => f.workflowType === main && f.status !== 'CONTINUED_AS_NEW')!).events ?? [];
      const last = events[events.length - 1];
      const ended = last.workflowExecutionCompletedEventAttributes
        ? 'completed'
        : `failed: ${last.workflowExecutionFailedEventAttributes?.failure?.applicationFailureInfo?.type ?? 'not a migration failure'}`;
      const failureType = SCENARIOS[scenario].failureType;
      expect({ scenario, ended }).toEqual({ scenario, ended: failureType ? `failed: ${failureType}` : 'completed' });
    }

    const all = [...fixtures.values()].flat();
    expect(all).toHaveLength(145);
    // docs/reliability.md's determinism row counts them, and the scenarios.
    const reliability = readFileSync(join(__dirname, '..', '..', 'docs', 'reliability.md'), 'utf8');
    expect(reliability).toContain(`${all.length} recorded histories in ${Object.keys(SCENARIOS).length} scenarios`);
    expect([...new Set(all.map((f) => f.workflowType))].sort()).toEqual([MIGRATION_WORKFLOW, TABLE_WORKFLOW, CHANGE_WORKFLOW, ...HELPER_WORKFLOW_TYPES].sort());
    expect(fixtures.get('online')!.map((f) => f.workflowType)).toContain(UNFREEZE_WORKFLOW);
    expect(fixtures.get('online-armed-freeze')!.map((f) => f.workflowType)).toContain(CLEANUP_WORKFLOW);
    // Continued-as-new: a table run that handed over, and a run that picked up from it.
    const can = fixtures.get('continued-as-new')!.filter((f) => f.workflowType === TABLE_WORKFLOW);
    expect(can.map((f) => f.status)).toContain('CONTINUED_AS_NEW');
    expect(can.some((f) => history(f).events?.[0].workflowExecutionStartedEventAttributes?.continuedExecutionRunId)).toBe(true);
    // The audited change plan recorded its patch marker: its replay exercises the patched branch.
    const audited = history(fixtures.get('change-audited')!.find((f) => f.workflowType === CHANGE_WORKFLOW)!);
    const markers = (audited.events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch').length;
    expect(markers).toBeGreaterThan(0);
  });

  it.each(Object.keys(SCENARIOS))('of the %s scenario replay on the current workflow code', async (scenario) => {
    const list = fixtures.get(scenario)!;
    expect(list.length).toBeGreaterThan(0);
    const failures: string[] = [];
    let replayed = 0;
    const results = Worker.runReplayHistories(
      options,
      list.map((f) => ({ workflowId: f.workflowId, history: history(f) })),
    );
    for await (const result of results) {
      const fixture = list[replayed];
      replayed += 1;
      if (result.error) failures.push(`${scenario}/${fixture.file} (${fixture.workflowId}): ${result.error.name}: ${result.error.message}`);
    }
    expect(replayed).toBe(list.length);
    expect(failures).toEqual([]);
  });
});
