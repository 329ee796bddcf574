/**
 * The dashboard's Capacity page in a real browser (Debian's chromium through playwright-core)
 * against a real orchestrator whose store holds jobs real bare-metal agents ran: an admin pastes a
 * proposed config, sees the side-by-side table and the chart, and a bad paste names its line.
 * The page is saved to docs/ui/capacity.png.
 */
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bareMetalConfig,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { browserAvailability, launchBrowser } from './browser.js';

const avail = browserAvailability();
let t: TestOrchestrator;
let browser: BrowserContext;
let page: Page;

const PROPOSED = `version: 1
globalMaxAgents: 10
scalers:
  - name: bm
    type: bare-metal
    maxAgents: 1
    labelSets:
      - labels: [linux, small]
        binaryPath: /bin/true
        trust: host
`;

beforeAll(async () => {
  if (avail.missing) throw new Error(avail.missing);
  t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 4 }) });
  // A history to replay: four jobs at once, on up to four agents now.
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: Object.fromEntries(
      [0, 1, 2, 3].map((i) => [`j${i}`, { runsOn: ['linux', 'small'], steps: [{ run: 'sleep 0.3' }] }]),
    ),
  });
  for (const j of run.body.jobs) expect((await t.waitForJob(j.id)).state).toBe('succeeded');
  browser = await launchBrowser();
  page = browser.pages()[0] ?? (await browser.newPage());
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await t?.stop();
});

describe.runIf(avail.run)('the Capacity page in chromium', () => {
  it('runs a what-if of a pasted config against the running one: table and chart', async () => {
    await page.goto(`${t.orch.url}/login`);
    await page.fill('#token', t.orch.adminToken);
    await page.click('button[type=submit]');
    await page.waitForSelector('#queue');
    await page.click('header a[href="#/capacity"]');
    await page.waitForSelector('#what-if-form');

    // A paste that is not a valid config: the refusal names the field and the line.
    await page.fill('#proposed', PROPOSED.replace('maxAgents: 1', 'maxAgents: lots'));
    await page.fill('#since', '1h');
    await page.click('#what-if-form button[type=submit]');
    await page.locator('#what-if-problems').filter({ hasText: 'scalers[0].maxAgents' }).waitFor();
    expect(await page.textContent('#what-if-problems')).toMatch(/proposed: proposed\.yaml: .*\(line 6\)/);

    await page.fill('#proposed', PROPOSED);
    await page.click('#what-if-form button[type=submit]');
    await page.waitForSelector('#what-if-result');
    expect(await page.isVisible('#what-if-problems')).toBe(false);
    const cell = (metric: string, col: number) =>
      page.textContent(`#what-if tr[data-pool="bm/linux,small"][data-metric=${metric}] td:nth-child(${col})`);
    // Columns: label set, metric, current, proposed, difference.
    expect(await cell('jobs', 3)).toBe('4');
    expect(await cell('jobs', 4)).toBe('4');
    // One agent at most under the proposed cap; the jobs then wait in turn.
    expect(await cell('peakAgents', 4)).toBe('1');
    expect(Number(await cell('waitP95Ms', 4))).toBeGreaterThan(Number(await cell('waitP95Ms', 3)));
    // The chart is drawn: the SVG loaded as an image, with a size of its own.
    const chart = page.locator('#what-if-chart');
    await chart.waitFor();
    expect(
      await chart.evaluate(
        (img) => (img as unknown as { complete: boolean; naturalWidth: number }).naturalWidth,
      ),
    ).toBeGreaterThan(0);
    await page.screenshot({ path: join(ROOT, 'docs/ui/capacity.png'), fullPage: true });
  });
});
