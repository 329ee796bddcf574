import { afterAll, afterEach, beforeAll } from 'vitest';
import type { Store } from '../../src/store/index.js';
import { freshStore } from './data-dir.js';
import { wipeStore } from './manager-harness.js';

/**
 * One real store for a whole test file: opened before its first test, closed after its last, and
 * wiped after each test once whatever the test pushed on `stops` (dispatchers, servers) has
 * stopped.
 */
export function storePerFile(): { readonly store: Store; stops: (() => Promise<void>)[] } {
  let opened: Awaited<ReturnType<typeof freshStore>> | undefined;
  const stops: (() => Promise<void>)[] = [];
  beforeAll(async () => {
    opened = await freshStore();
  }, 60_000);
  afterAll(async () => opened?.close());
  afterEach(async () => {
    for (const s of stops.splice(0)) await s();
    await wipeStore(opened!.store);
  });
  return {
    get store() {
      return opened!.store;
    },
    stops,
  };
}
