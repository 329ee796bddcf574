import { errorMessage } from '../util/errors.js';
import type { PeerPart } from './cluster-view.js';

/** The peers' parts, or none and why: the answering instance's own part is shown even while the database is away. */
export interface PeerRead {
  parts: PeerPart[];
  /** Set when the peers' parts could not be read; the answer then carries only this instance's rows. */
  problem?: string;
}

export async function readPeerParts(read: (() => Promise<PeerPart[]>) | undefined): Promise<PeerRead> {
  if (!read) return { parts: [] };
  try {
    return { parts: await read() };
  } catch (err) {
    return { parts: [], problem: `the other instances' parts could not be read: ${errorMessage(err)}` };
  }
}

/** The field a merged answer carries when it holds this instance's rows only. */
export const partial = (r: PeerRead) => (r.problem ? { peersUnavailable: r.problem } : {});
