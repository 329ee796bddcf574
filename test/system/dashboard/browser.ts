import { existsSync } from 'node:fs';
import { chromium, type BrowserContext } from 'playwright-core';
import { tempDir } from '../../helpers/temp-dirs.js';

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
  // Removed when the test file ends (temp-dirs-cleanup.ts): the browser's helper processes may
  // still be writing into it for a moment after the context says it closed.
  const profile = await tempDir('kici-chromium-');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 860 },
  });
  return context;
}
