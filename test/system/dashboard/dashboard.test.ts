/**
 * The dashboard in a real browser (Debian's chromium through playwright-core) against a real
 * orchestrator with real bare-metal agents: log in, follow a job from queued to succeeded and its
 * log as it is written without reloading, drain and resume an agent, see a spawn failure with its
 * reason. Every page is saved to docs/ui/.
 */
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AGENT_BIN,
  bareMetalConfig,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { browserAvailability, launchBrowser } from './browser.js';
import { tempDir } from '../../helpers/temp-dirs.js';

const avail = browserAvailability();
const SHOTS = join(ROOT, 'docs/ui');
let t: TestOrchestrator;
let browser: BrowserContext;
let page: Page;
let gates: string;

const gate = (name: string) => join(gates, name);
const open = (name: string) => writeFile(gate(name), '');
/** Text of an element includes `text` (evaluated in the page). */
/** Wait until an element holds `text` (a locator, not a page-side eval: the page's CSP forbids eval). */
const textIn = (sel: string, text: string) => page.locator(sel).filter({ hasText: text }).waitFor();
const goto = (hash: string) => page.evaluate(`location.hash = ${JSON.stringify(hash)}`);
const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

beforeAll(async () => {
  if (avail.missing) throw new Error(avail.missing);
  gates = await tempDir('kici-ui-gates-');
  // The agent starts only once the test opens `agent-go`: until then the job is visibly queued.
  const held = join(gates, 'held-agent');
  await writeFile(
    held,
    `#!/bin/sh\nwhile [ ! -e '${gate('agent-go')}' ]; do sleep 0.05; done\nexec '${AGENT_BIN}' "$@"\n`,
  );
  const broken = join(gates, 'broken-agent');
  await writeFile(broken, '#!/bin/sh\necho "cannot reach the orchestrator" >&2\nexit 3\n');
  await Promise.all([chmod(held, 0o755), chmod(broken, 0o755)]);
  const config = bareMetalConfig({}, [
    { labels: ['linux', 'small'], binaryPath: held },
    { labels: ['linux', 'broken'], binaryPath: broken },
  ]);
  t = await startTestOrchestrator({ config });
  browser = await launchBrowser();
  page = browser.pages()[0] ?? (await browser.newPage());
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await t?.stop();
});

describe.runIf(avail.run)('the dashboard in chromium', () => {
  it('refuses a wrong token and logs in with the right one into an HttpOnly cookie', async () => {
    await page.goto(`${t.orch.url}/`);
    await page.waitForSelector('#token');
    expect(new URL(page.url()).pathname).toBe('/login');
    await shot('login');
    await page.fill('#token', 'not-the-token');
    await page.click('button[type=submit]');
    await page.waitForSelector('.error[role=alert]');
    await page.fill('#token', t.orch.adminToken);
    await page.click('button[type=submit]');
    await page.waitForSelector('#queue');
    const cookie = (await browser.cookies()).find((c) => c.name === 'kici_token');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(await page.evaluate('document.cookie')).not.toContain('kici_token');
    await page.waitForSelector('[data-live=up]');
  });

  it('follows a job from queued to running to succeeded, and its log lines as they come, without a reload', async () => {
    await page.evaluate('window.notReloaded = true');
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        build: {
          runsOn: ['linux', 'small'],
          steps: [
            {
              run: `echo first-line; while [ ! -e '${gate('step-go')}' ]; do sleep 0.05; done; echo second-line`,
            },
          ],
        },
      },
    });
    const id = run.body.jobs[0]!.id;
    await goto(`#/jobs/${id}`);
    await page.waitForSelector('h2 [data-state=queued]');
    await open('agent-go');
    await page.waitForSelector('h2 [data-state=running]');
    await textIn('#log', 'first-line');
    expect(await page.textContent('#log')).not.toContain('second-line');
    await shot('job-running');

    await page.click('a[href="#/agents"]');
    const row = page.locator('#agents tr[data-agent]').first();
    await row.locator('button', { hasText: 'Drain' }).click();
    await row.locator('[data-state=draining]').waitFor();
    await row.locator('button', { hasText: 'Resume' }).waitFor();
    await shot('agents');
    await row.locator('button', { hasText: 'Resume' }).click();
    await row.locator('button', { hasText: 'Drain' }).waitFor();

    await goto(`#/jobs/${id}`);
    await page.waitForSelector('h2 [data-state=running]');
    await open('step-go');
    await page.waitForSelector('h2 [data-state=succeeded]');
    await textIn('#log', 'second-line');
    await page.waitForSelector('#steps');
    await shot('job');
    await page.click('a[href="#/jobs"]');
    await page.waitForSelector(`#jobs tr[data-job="${id}"] [data-state=succeeded]`);
    await shot('jobs');
    expect(await page.evaluate('window.notReloaded')).toBe(true);
  });

  it('shows a spawn failure with its reason on the overview, explains the waiting job and diagnoses its scaler', async () => {
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { deploy: { runsOn: ['linux', 'broken'], steps: [{ run: 'true' }] } },
    });
    await page.click('a[href="#/"]');
    await textIn('#spawn-failures', 'exited-before-register');
    await textIn('#queue', 'broken,linux');
    await shot('overview');
    await goto(`#/scalers?job=${run.body.jobs[0]!.id}`);
    await page.waitForSelector('#explain');
    await page.waitForSelector('#diagnose');
    // The waiting job's spawns keep failing: its scaler's check is a FAIL row naming the kind.
    await page
      .locator('#checks tr[data-check="scaler:bm"]')
      .filter({ has: page.locator('[data-status=FAIL]') })
      .filter({ hasText: 'exited-before-register' })
      .waitFor();
    await shot('scalers');
    await page.click('a[href="#/events"]');
    await page.waitForSelector('section h2');
    await shot('events');
    await t.api('POST', `/api/v1/jobs/${run.body.jobs[0]!.id}/cancel`);
  });

  it('shows the cluster page', async () => {
    await page.click('a[href="#/cluster"]');
    await page.waitForSelector('section h2');
    await shot('cluster');
  });
});
