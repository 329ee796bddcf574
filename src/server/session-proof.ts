import { randomBytes, timingSafeEqual } from 'node:crypto';
import { hashSecret } from '../store/tokens-repo.js';
import type { SessionRecord } from '../store/sessions-repo.js';

/**
 * Who may register as an agent id that already has a session. A token alone is not enough: a job
 * step that got hold of its agent's token must not be able to replace the agent and be handed the
 * next job. The agent process proves it is the same one with the secret it was given at its first
 * registration, which it keeps only in memory.
 */
export type SessionDecision =
  | { ok: true; resume: true; jobsTaken: number }
  | { ok: true; resume: false; replacing: string | null }
  | { ok: false; reason: string };

export interface SessionFacts {
  record: SessionRecord | undefined;
  /** The secret the registration presented, if any. */
  proof: string | undefined;
  /** Single-use (scaler) agents never start a second process under the same id. */
  singleUse: boolean;
  /** Connected somewhere, or a job is still handed to it. */
  inUse: boolean;
}

export function decideSession(f: SessionFacts): SessionDecision {
  if (!f.record) return { ok: true, resume: false, replacing: null };
  if (f.proof !== undefined && sameHash(hashSecret(f.proof), f.record.secretHash))
    return { ok: true, resume: true, jobsTaken: f.record.jobsTaken };
  const what = f.proof === undefined ? 'no session proof' : 'a wrong session proof';
  if (f.singleUse) return { ok: false, reason: `${what} for a single-use agent that already registered` };
  // A static agent's process may restart (the operator's restart, a crash): a new process gets a
  // new session, but only once the old one is neither connected nor holding a job.
  if (f.inUse) return { ok: false, reason: `${what} while the agent's session is in use` };
  return { ok: true, resume: false, replacing: f.record.secretHash };
}

export function newSessionSecret(): string {
  return `kses_${randomBytes(32).toString('base64url')}`;
}

function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
