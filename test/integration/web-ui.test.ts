/**
 * What an operator sees in the Temporal Web UI (2.42.1, embedded in the dev server), read in a
 * real headless Chromium (Debian's `chromium`, driven by playwright-core): a migration waiting
 * for approval, one that failed on a value the target refuses, one past its deadline, and a
 * refused preflight. Text is asserted through the page's DOM (the details panels are iframes the
 * UI renders markdown into), never through pixels; full-page screenshots go to a folder the test
 * prints, for a person to look at.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Browser, chromium, FrameLocator, Locator, Page } from 'playwright-core';
import { Worker } from '@temporalio/worker';
import { ensureChromium } from '../../src/dev/chromium';
import { PREFLIGHT_WORKFLOW } from '../../src/core/names';
import { workflowBundle } from '../../src/temporal/bundle';
import { ActivityHold } from '../helpers/interceptors';
import { eventually, resultWithin, waitForPhase } from '../helpers/stack';
import { stackSuite } from '../helpers/suite';

const SCREENS = join(tmpdir(), 'ferry-ui-screens', `${new Date().toISOString().replace(/[:.]/g, '-')}-${process.pid}`);

describe('the Web UI in headless Chromium', () => {
  let browser: Browser;
  let page: Page;
  let executablePath: string;
  const hold = new ActivityHold();

  // Chromium is found (or installed) before the databases and the stack exist.
  beforeAll(() => {
    executablePath = ensureChromium();
    mkdirSync(SCREENS, { recursive: true });
    process.stderr.write(`web-ui test: screenshots in ${SCREENS}\n`);
  });

  const suite = stackSuite({
    name: 'webui',
    databases: {
      source: `CREATE TABLE public.customers (id bigint PRIMARY KEY, name text);
       INSERT INTO public.customers SELECT g, 'customer ' || g FROM generate_series(1, 5000) g;
       -- The target gets the CHECK (validated there), which row 2001 violates: the copy fails with 23514.
       CREATE TABLE public.strict (id int PRIMARY KEY, v int);
       INSERT INTO public.strict SELECT g, g FROM generate_series(1, 2000) g;
       INSERT INTO public.strict VALUES (2001, -1);
       ALTER TABLE public.strict ADD CONSTRAINT v_positive CHECK (v > 0) NOT VALID;
       CREATE TABLE public.late (id int PRIMARY KEY, v int);
       INSERT INTO public.late SELECT g, g FROM generate_series(1, 100) g;
       CREATE TABLE public.keyless (v int);
       ANALYZE;`,
      target: '',
    },
    connections: { src: 'source', dst: 'target' },
    workers: 0,
    temporal: { headless: false },
    ready: async () => {
      await suite.stack.startWorker({ interceptors: hold.interceptors() });
      browser = await chromium.launch({ executablePath });
      page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    },
    cleanup: async () => {
      await browser?.close();
    },
  });

  const ui = (path: string) => `${suite.stack.server.uiUrl}/namespaces/${suite.stack.server.namespace}${path}`;

  async function screenshot(name: string): Promise<void> {
    await page.screenshot({ path: join(SCREENS, `${name}.png`), fullPage: true });
  }

  /** The panel of the workflow page under a heading: the nearest container of the heading that holds `content`. */
  const panel = (heading: string, content: string): Locator =>
    page.locator(`xpath=//*[self::h2 or self::h3][normalize-space()="${heading}"]/ancestor::div[.//${content}][1]`);
  /** The iframe a User Metadata panel renders its markdown into. */
  const markdownFrame = (heading: string): Locator => panel(heading, 'iframe').locator('iframe[title="output"]');
  const markdown = (heading: string): FrameLocator => markdownFrame(heading).contentFrame();
  /** The code view of a JSON panel (Input, Result). */
  const code = (heading: string): Locator => panel(heading, '*[contains(@class, "cm-content")]').locator('.cm-content');

  async function openUserMetadata(id: string): Promise<void> {
    await page.goto(ui(`/workflows/${encodeURIComponent(id)}`));
    await page.getByRole('tab', { name: 'User Metadata' }).click();
    await markdown('Current Details').locator('main').waitFor();
  }

  /** The text of a markdown panel, once it holds `expected`. */
  async function markdownText(heading: string, expected: string): Promise<string> {
    const body = markdown(heading).locator('main');
    await body.filter({ hasText: expected }).waitFor({ timeout: 20_000 }).catch(() => undefined);
    return body.innerText();
  }

  /** Whether the element's box ends inside its frame's box: what a person sees, not what the frame cuts off. */
  async function visibleInFrame(heading: string, element: Locator): Promise<{ ok: boolean; detail: string }> {
    const frame = await markdownFrame(heading).boundingBox();
    const box = await element.boundingBox();
    if (!frame || !box) return { ok: false, detail: `no box (frame ${JSON.stringify(frame)}, element ${JSON.stringify(box)})` };
    return { ok: box.y + box.height <= frame.y + frame.height, detail: `element ends at ${box.y + box.height}, frame at ${frame.y + frame.height}` };
  }

  /** The workflow's result pane (History tab): for a failed workflow, its failure as JSON, the top message first. */
  async function resultPane(id: string): Promise<string> {
    await page.goto(ui(`/workflows/${encodeURIComponent(id)}`));
    const result = code('Result');
    await result.filter({ hasText: '"message"' }).waitFor();
    return result.innerText();
  }

  const firstMessage = (json: string) => /"message": "((?:[^"\\]|\\.)*)"/.exec(json)?.[1].replace(/\\"/g, '"');

  it('a migration waiting for approval: its current details show the table, the phase and `ferry approve <id>`, all of it inside the frame; once done, no lag', async () => {
    const { id } = await suite.stack.ferry.start(
      { source: 'src', target: 'dst', mode: 'online', cutover: { approval: 'manual' }, tables: ['public.customers'] },
      { id: 'shop-move' },
    );
    await waitForPhase(suite.stack.ferry, id, 'AWAITING_APPROVAL', 120_000);
    await openUserMetadata(id);
    const text = await markdownText('Current Details', 'ferry approve shop-move');
    await screenshot('1-waiting-for-approval-user-metadata');

    const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
    expect(lines[0]).toBe('RUNNING · AWAITING_APPROVAL');
    const header = await markdown('Current Details').locator('thead th').allInnerTexts();
    expect(header).toEqual(['table', 'phase', 'rows', 'lag']);
    const row = await markdown('Current Details').locator('tbody tr').filter({ hasText: 'public.customers' }).locator('td').allInnerTexts();
    expect(row.slice(0, 3)).toEqual(['public.customers', 'AWAITING_APPROVAL', '5,000 / ~5,000']);
    const next = markdown('Current Details').locator('p').filter({ hasText: 'Next:' });
    expect(await next.innerText()).toBe('Next: waiting for approval: ferry approve shop-move starts the cutover (ferry cancel shop-move rolls back)');
    // The UI sizes the frame to its body and cuts off what lies below: the next action must not be there.
    expect(await visibleInFrame('Current Details', next)).toEqual({ ok: true, detail: expect.any(String) });

    expect(await markdownText('Summary', 'Ferry online')).toContain('Ferry online migration src → dst: 1 table(s)');
    const details = await markdownText('Details', 'ferry watch shop-move');
    expect(details).toContain('online migration of 1 table(s) from connection src to dst');
    expect(details).toContain('The cutover waits for ferry approve shop-move.');

    // Approved and done: the table's lag reading (taken before the cutover's drain) is no longer shown.
    await suite.stack.ferry.approve(id);
    expect((await resultWithin(suite.stack.ferry, id)).state).toBe('SUCCEEDED');
    await openUserMetadata(id);
    await markdownText('Current Details', 'Outcome');
    await screenshot('1b-succeeded-user-metadata');
    const done = await markdown('Current Details').locator('tbody tr').filter({ hasText: 'public.customers' }).locator('td').allInnerTexts();
    expect(done).toEqual(['public.customers', 'COMPLETED', '5,000 / ~5,000', '']);
  });

  it('a migration that failed: the PostgreSQL root cause and SQLSTATE at the top of the failure, and the state in the details', async () => {
    const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', tables: ['public.strict'] }, { id: 'strict-move' });
    expect((await resultWithin(suite.stack.ferry, id)).state).toBe('FAILED');

    const json = await resultPane(id);
    await screenshot('2-failed-history');
    expect(firstMessage(json)).toBe(
      'copy public.strict chunk 0: PostgreSQL error 23514: new row for relation "strict" violates check constraint "v_positive"; rolled back: dropped what it created on the target',
    );
    // Temporal's own status badge beside the id.
    expect(await page.getByText('Failed', { exact: true }).first().isVisible()).toBe(true);

    await page.getByRole('tab', { name: 'User Metadata' }).click();
    const text = await markdownText('Current Details', 'Outcome');
    await screenshot('3-failed-user-metadata');
    const lines = text.split('\n').map((l) => l.trim()).filter(Boolean);
    expect(lines[0]).toBe('FAILED · stopped in FULL_MIGRATING · rolled back');
    expect(lines[1]).toBe(
      'Why: PostgresError.23514 copy public.strict chunk 0: PostgreSQL error 23514 — new row for relation "strict" violates check constraint "v_positive"',
    );
    expect(text).toContain('Next: fix the cause, then ferry retry strict-move starts it again');
    const outcome = markdown('Current Details').locator('p').filter({ hasText: 'Outcome:' });
    expect(await outcome.innerText()).toBe('Outcome: FAILED · 0 rows');
    expect(await visibleInFrame('Current Details', outcome)).toEqual({ ok: true, detail: expect.any(String) });
  });

  it('a migration past its deadline: TIMED OUT at the top of the failure, with the deadline and what was rolled back', async () => {
    const held = hold.arm('copyChunk'); // the copy sits in its first slice until the deadline cancels it
    try {
      const { id } = await suite.stack.ferry.start({ source: 'src', target: 'dst', deadline: '3s', tables: ['public.late'] }, { id: 'late-move' });
      await held;
      expect((await resultWithin(suite.stack.ferry, id)).state).toBe('TIMED_OUT');

      const json = await resultPane(id);
      await screenshot('4-timed-out-history');
      expect(firstMessage(json)).toBe('TIMED OUT: the deadline (3s) passed before the migration finished; rolled back: dropped what it created on the target');

      await page.getByRole('tab', { name: 'User Metadata' }).click();
      const text = await markdownText('Current Details', 'Outcome');
      await screenshot('5-timed-out-user-metadata');
      expect(text.split('\n')[0].trim()).toBe('TIMED_OUT · the deadline passed before the migration finished · stopped in FULL_MIGRATING · rolled back');
      expect(text).toContain('Why: DeadlineExceeded deadline reached before the migration finished');
    } finally {
      hold.disarm('copyChunk');
    }
  });

  it('a refused preflight: ferry start exits 2 with the refusal, and its helper workflow is Completed, not Failed, in the list', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ferry-webui-spec-'));
    writeFileSync(join(dir, 'keyless.yaml'), 'id: keyless-move\nsource: src\ntarget: dst\nmode: online\ntables: [public.keyless]\n');
    const run = await suite.stack.runCli(['start', join(dir, 'keyless.yaml')]).finally(() => rmSync(dir, { recursive: true, force: true }));
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('refused (NoPrimaryKey)');
    expect(run.stderr).toContain('table public.keyless has no primary key');

    const helpers = await eventually(async () => {
      const found = [];
      for await (const w of suite.stack.client.workflow.list({ query: `WorkflowType = '${PREFLIGHT_WORKFLOW}' AND WorkflowId STARTS_WITH 'keyless-move.preflight.'` })) found.push(w);
      return found.length ? found : undefined;
    });
    expect(helpers.map((w) => w.status.name)).toEqual(['COMPLETED']);
    const helperId = helpers[0].workflowId;
    // Its history (with the patch marker) replays on the current workflow code.
    const history = await suite.stack.client.workflow.getHandle(helperId).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: workflowBundle() }, history, helperId);

    await page.goto(ui('/workflows'));
    const row = page.locator('tr', { hasText: helperId });
    await row.waitFor();
    await screenshot('6-workflow-list');
    expect(await row.innerText()).toMatch(/Completed/);
    // No workflow of the suite failed but the two that did.
    const failed = await page.locator('tr', { hasText: 'Failed' }).allInnerTexts();
    // A row's text holds the workflow id, then its run id.
    expect(failed.map((t) => /([a-z-]+-move(?:\/table-\d+)?)\s+[0-9a-f]{8}-/.exec(t)?.[1]).sort()).toEqual(['late-move', 'strict-move', 'strict-move/table-0']);

    await page.goto(ui(`/workflows/${encodeURIComponent(helperId)}`));
    const json = await code('Result').filter({ hasText: 'refused' }).innerText();
    expect(json).toContain('"type": "NoPrimaryKey"');
    await page.getByRole('tab', { name: 'User Metadata' }).click();
    expect(await markdownText('Summary', 'preflight')).toContain('Ferry preflight of migration keyless-move: checks before it starts; starts and changes nothing');
    expect(await markdownText('Current Details', 'Refused')).toContain('Refused by preflight (nothing was started or changed): NoPrimaryKey');
    await screenshot('7-refused-preflight-user-metadata');
  });
});
