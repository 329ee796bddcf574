/**
 * The dashboard for two people at once, in chromium against a real orchestrator with real
 * bare-metal agents: a `viewer` who may look but whose drain is refused with the reason, and an
 * admin whose page keeps working across an orchestrator restart on the same port and data dir
 * (the live stream comes back, the login cookie still works, a job submitted after the restart
 * shows live). A token revoked while its page is open sends that page to the login form, saying why.
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../helpers/crash.js';
import { freshDataDir } from '../../helpers/data-dir.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { browserAvailability, launchBrowser } from './browser.js';

const avail = browserAvailability();
const SHOTS = join(ROOT, 'docs/ui');
let t: TestOrchestrator;
let start: () => Promise<TestOrchestrator>;
let gates: string;
let dataDir: string;
const contexts: BrowserContext[] = [];
let admin: Page;
let viewer: Page;
let viewerTokenId: string;

const gate = (name: string) => join(gates, name);
const open = (name: string) => writeFile(gate(name), '');
/** A job whose one step prints a line and then waits for its gate. */
const gatedJob = async (name: string) => {
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: {
      [name]: {
        runsOn: ['linux', 'small'],
        steps: [{ run: `echo ${name}-started; while [ ! -e '${gate(name)}' ]; do sleep 0.05; done` }],
      },
    },
  });
  expect(run.status).toBe(201);
  return run.body.jobs[0]!.id;
};

/** A fresh browser profile logged in with `token`, on the overview. */
async function loggedIn(token: string): Promise<Page> {
  const context = await launchBrowser();
  contexts.push(context);
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(`${t.orch.url}/login`);
  await page.fill('#token', token);
  await page.click('button[type=submit]');
  await page.waitForSelector('#queue');
  await page.waitForSelector('[data-live=up]');
  return page;
}

beforeAll(async () => {
  if (avail.missing) throw new Error(avail.missing);
  gates = await mkdtemp(join(tmpdir(), 'kici-ui-restart-'));
  await chmod(gates, 0o755);
  dataDir = await freshDataDir();
  const port = await freePort();
  const config = bareMetalConfig({}, [{ labels: ['linux', 'small'], binaryPath: AGENT_BIN }]);
  // Same port, data dir and admin token file each time: a restart, not a new orchestrator.
  start = () => startTestOrchestrator({ config, dataDir, port, adminTokenFile: join(gates, 'admin-token') });
  t = await start();
  const made = await t.api<{ id: string; token: string }>('POST', '/api/v1/access/tokens', {
    name: 'dash-viewer',
    role: 'viewer',
  });
  expect(made.status).toBe(201);
  viewerTokenId = made.body.id;
  admin = await loggedIn(t.orch.adminToken);
  viewer = await loggedIn(made.body.token);
}, 180_000);

afterAll(async () => {
  for (const c of contexts) await c.close();
  await t?.stop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
  if (gates) await rm(gates, { recursive: true, force: true });
});

describe.runIf(avail.run)('the dashboard for a viewer and across a restart', () => {
  it('refuses a viewer the drain, showing why, and leaves the agent as it was', async () => {
    const id = await gatedJob('viewed');
    await viewer.evaluate(`location.hash = '#/agents'`);
    const row = viewer.locator('#agents tr[data-agent]').filter({ hasText: id.slice(0, 8) });
    await row.locator('[data-state=busy]').waitFor();
    await row.locator('button', { hasText: 'Drain' }).click();
    const refusal = viewer.locator('.error[role=alert]');
    await refusal.filter({ hasText: 'needs the operator role' }).waitFor();
    expect(await refusal.textContent()).toContain('"dash-viewer" has the viewer role');
    await viewer.screenshot({ path: join(SHOTS, 'agents-viewer.png'), fullPage: true });
    expect(await row.locator('[data-state=draining]').count()).toBe(0);
    await open('viewed');
    expect((await t.waitForJob(id)).state).toBe('succeeded');
  });

  it('keeps working across an orchestrator restart: the stream reconnects, the cookie holds, a new job shows live', async () => {
    await admin.evaluate(`location.hash = '#/jobs'`);
    await admin.waitForSelector('#jobs');
    await admin.evaluate('window.notReloaded = true');
    await t.stop();
    await admin.waitForSelector('[data-live=down]');
    await viewer.waitForSelector('[data-live=down]');
    t = await start();
    await admin.waitForSelector('[data-live=up]');
    await viewer.waitForSelector('[data-live=up]');

    const id = await gatedJob('after-restart');
    await admin.locator(`#jobs tr[data-job="${id}"] [data-state=running]`).waitFor();
    await open('after-restart');
    await admin.locator(`#jobs tr[data-job="${id}"] [data-state=succeeded]`).waitFor();
    await admin.screenshot({ path: join(SHOTS, 'jobs-after-restart.png'), fullPage: true });
    expect(await admin.evaluate('window.notReloaded')).toBe(true);
    expect(new URL(admin.url()).pathname).toBe('/');
  });

  it('sends a page whose token was revoked to the login form, saying why', async () => {
    await viewer.evaluate(`location.hash = '#/jobs'`);
    await viewer.waitForSelector('#jobs');
    const revoked = await t.api('DELETE', `/api/v1/access/tokens/${viewerTokenId}`);
    expect(revoked.status).toBe(200);
    // Any change reloads the page's data, and the first read after the revocation is refused.
    const id = await gatedJob('revoked');
    await viewer.waitForSelector('#expired');
    expect(new URL(viewer.url()).pathname).toBe('/login');
    expect(await viewer.textContent('#expired')).toContain('Log in again');
    await viewer.screenshot({ path: join(SHOTS, 'login-expired.png'), fullPage: true });
    await open('revoked');
    await t.waitForJob(id);
  });
});
