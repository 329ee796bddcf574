import { sql } from 'kysely';

/**
 * Whether a spawn row's agent may be adopted by any orchestrator on the store: the backend's
 * capability, recorded on the row (`peer_adoptable`, migration 031). An orchestrator from before
 * that migration writes its event rows without the flag, which then reads false. A cluster upgraded
 * one instance at a time runs such instances beside new ones for a while, and their event
 * provisions must still be counted on the shared cap, adopted and reaped. So a row without the flag
 * that names the event backend counts as well; this second half can go once no instance older than
 * the migration can run against the store.
 */
export const PEER_ADOPTABLE_ROW = sql<boolean>`(scaler_spawning_agents.peer_adoptable
  or scaler_spawning_agents.backend_type = 'event')`;

/** The same rule for a row already read. */
export function peerAdoptableRow(row: { peer_adoptable: boolean; backend_type: string }): boolean {
  return row.peer_adoptable || row.backend_type === 'event';
}
