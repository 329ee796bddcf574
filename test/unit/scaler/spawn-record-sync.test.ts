/**
 * A spawn's record reaches the disk through a held sync (src/store/sync-gate.ts). Compute on this
 * host whose backend finds it again without its record is launched while that sync runs; any other
 * backend's launch waits for it. On the real embedded database on disk, with the syncs that run off
 * the main thread released by the test.
 */
import { fdatasyncSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterEach, describe, expect, it } from 'vitest';
import { installFileSync, startParamsFor, type NodeFileLayer } from '../../../src/store/durability.js';
import { createStore } from '../../../src/store/index.js';
import { openPGlite, type OpenedDatabase } from '../../../src/store/open.js';
import { SyncGate } from '../../../src/store/sync-gate.js';
import { freshDataDir } from '../../helpers/data-dir.js';
import { ManagerHarness } from '../../helpers/manager-harness.js';
import { eventually } from '../../helpers/orchestrator.js';
import { bareMetal } from '../../helpers/scaler-config.js';

let h: ManagerHarness | undefined;
let opened: OpenedDatabase | undefined;
let dir: string | undefined;
afterEach(async () => {
  await h?.close();
  await opened?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  h = opened = dir = undefined;
});

/** A store on disk whose held syncs wait in `waiting` until the test releases them. */
async function gatedStore() {
  dir = await freshDataDir();
  const pgDir = join(dir, 'pg');
  const pglite = new PGlite(pgDir, { startParams: startParamsFor(PGlite.defaultStartParams, 'on') });
  await pglite.waitReady;
  const waiting: (() => void)[] = [];
  const gate = installFileSync(
    pglite.Module as unknown as NodeFileLayer,
    new SyncGate(fdatasyncSync, (fd) => new Promise<void>((ok) => waiting.push(() => ok(fdatasyncSync(fd))))),
  );
  opened = await openPGlite(pglite, pgDir);
  const releaseAll = () => waiting.splice(0).forEach((release) => release());
  return { store: createStore(opened.db, 'pglite', gate), waiting, releaseAll };
}

async function harness(cleansOrphans: boolean) {
  const { store, waiting, releaseAll } = await gatedStore();
  h = await ManagerHarness.create({
    config: { version: 1, scalers: [bareMetal('local', [['linux']])] },
    store,
    configureBackend: (b) => {
      (b.capabilities as { cleansOrphans: boolean }).cleansOrphans = cleansOrphans;
    },
  });
  return { h, waiting, releaseAll };
}

describe("a spawn's record and its sync", () => {
  it('local compute whose backend cleans its orphans is launched while the record is being synced', async () => {
    const { h, waiting, releaseAll } = await harness(true);
    const submitted = h.submit({ a: { runsOn: ['linux'] } });
    await eventually(() => h.allSpawns().length === 1, 10_000, 'the agent launched');
    // Neither the run's sync nor the record's has been let through.
    expect(waiting.length).toBeGreaterThanOrEqual(1);
    releaseAll();
    await submitted;
  });

  it('a backend that cannot find its compute without the record launches only once the record is on disk', async () => {
    const { h, waiting, releaseAll } = await harness(false);
    const submitted = h.submit({ a: { runsOn: ['linux'] } });
    // The run's sync, then the record's: both wait here, and so does the launch.
    await eventually(() => waiting.length >= 2, 10_000, "the record's sync asked for");
    expect(h.allSpawns()).toEqual([]);
    releaseAll();
    await eventually(() => h.allSpawns().length === 1, 10_000, 'the agent launched');
    await submitted;
  });
});
