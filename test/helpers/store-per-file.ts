import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { Store } from '../../src/store/index.js';
import { freshStore } from './data-dir.js';

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

/** Remove every row the scaler and the dispatcher wrote (a store shared across property runs). */
export async function wipeStore(store: Store): Promise<void> {
  await sql`delete from scaler_agent_jobs`.execute(store.db);
  await sql`delete from scaler_spawn_times`.execute(store.db);
  await sql`delete from scaler_reservations`.execute(store.db);
  await sql`delete from scaler_spawning_agents`.execute(store.db);
  await sql`delete from agent_tokens`.execute(store.db);
  await sql`delete from agents`.execute(store.db);
  await sql`delete from job_logs`.execute(store.db);
  await sql`delete from job_log_chunks`.execute(store.db);
  await sql`delete from step_results`.execute(store.db);
  await sql`delete from jobs`.execute(store.db);
  await sql`delete from runs`.execute(store.db);
}
