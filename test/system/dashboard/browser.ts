import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

/** Debian's chromium; the system tier installs it (no browser download). */
export const CHROMIUM = '/usr/bin/chromium';

export const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Whether the browser tests run here. Under CI they must: a missing chromium fails them. Elsewhere
 * they are skipped with a message naming the package to install.
 */
export function browserAvailability(): { run: boolean; missing?: string } {
  if (existsSync(CHROMIUM)) return { run: true };
  const missing = `${CHROMIUM} not found: install Debian's chromium (apt-get install --no-install-recommends chromium)`;
  if (process.env.CI === 'true') return { run: true, missing };
  console.warn(`dashboard browser tests skipped: ${missing}`);
  return { run: false, missing };
}

/** A fresh profile for every run: nothing cached or remembered from an earlier test. */
export async function launchBrowser(): Promise<BrowserContext> {
  const profile = await mkdtemp(join(tmpdir(), 'kici-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 860 },
  });
  // The profile is this context's alone: it goes when the browser does.
  context.once('close', () => void rm(profile, { recursive: true, force: true }));
  return context;
}
