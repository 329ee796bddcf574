import { chmod, chown, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { holderAlive, SPARE_PREFIX, spareOwner, thisHolder } from './spare-user.js';
import { errorMessage } from '../../../util/errors.js';
import { uidsWithProcesses } from './proc-uids.js';

/**
 * Per-agent unprivileged users for `runAsUser: dynamic` (our extension). Uids come from a fixed range
 * with no passwd entries, so nothing is added to /etc/passwd and nothing has to be deleted again.
 * Each uid is claimed by an atomic `mkdir` under a root-only directory shared by every orchestrator
 * on the host, so two scalers (or two orchestrators) never hand out the same uid. The claim names the
 * agent; the claim and the agent's 0700 home are the host-local evidence a restart uses to reclaim a
 * uid (no leak), see `reclaim`.
 */
export const AGENT_UID_FIRST = 61_000;
export const AGENT_UID_COUNT = 1_000;

export interface AgentUser {
  uid: number;
  gid: number;
  /** The agent's own 0700 work dir (also its HOME). */
  home: string;
}

export class AgentUserPool {
  private readonly claims: string;
  /** One allocation at a time in this process; other processes are kept apart by the mkdir claim. */
  private chain: Promise<unknown> = Promise.resolve();
  /** A uid and empty home claimed ahead for the next agent (see prepareSpare); never shared. */
  private spare: AgentUser | undefined;
  private closed = false;
  private sweptSpares = false;

  constructor(
    readonly root = defaultHomesRoot(),
    private readonly first = AGENT_UID_FIRST,
    private readonly count = AGENT_UID_COUNT,
    /** Told of a fault the pool works around but that leaves something behind (the scaler's log). */
    private readonly warn: (msg: string, context: Record<string, unknown>) => void = () => {},
  ) {
    this.claims = join(root, '.uids');
  }

  homeOf(agentId: string): string {
    return join(this.root, agentId);
  }

  /** The directory whose existence claims `uid` (removing it frees the uid). */
  claimPathOf(uid: number): string {
    return join(this.claims, String(uid));
  }

  acquire(agentId: string): Promise<AgentUser> {
    const run = this.chain.then(async () => {
      // Taken off the field before anything awaits: a spare is handed to one agent only.
      const ready = this.spare;
      this.spare = undefined;
      if (ready) {
        try {
          return this.handOver(ready, agentId);
        } catch {
          // Half handed over (the disk, say): dropped whole, and the agent claims a uid itself; a
          // disk that still refuses fails that claim with its own error, which the spawn reports.
          await this.dropSpare(ready).catch((err: unknown) =>
            // Its claim names this live process as holder (or the agent, while it runs), so the
            // sweeps leave it: a uid fewer and a stray home, possibly until a restart.
            this.warn(
              `could not drop the spare agent uid ${ready.uid} after its hand-over failed; its claim and home may stay until the orchestrator restarts`,
              { uid: ready.uid, home: ready.home, err: errorMessage(err) },
            ),
          );
        }
      }
      // A full range first frees claims that crashes left behind, then tries once more.
      return this.claimFree(agentId).catch(async (err: unknown) => {
        if (!(await this.reclaimStale(() => false))) throw err;
        return this.claimFree(agentId);
      });
    });
    // The chain only orders pool operations; each caller still gets its own operation's rejection.
    this.chain = run.catch(() => undefined);
    return run;
  }

  /**
   * Keep one uid and home claimed ahead of the next `acquire`, so that claim (a scan of every
   * process on the host, then a few file operations) is not on an agent's start. Queued behind the
   * pool's other operations; a no-op while one is held; `close` drops it. The caller picks a quiet
   * moment (not while an agent boots). The claim names this process as its holder, so a crash
   * leaves nothing that the next pool on the host does not free.
   */
  prepareSpare(): void {
    if (this.closed) return;
    this.chain = this.chain
      .then(async () => {
        if (this.spare || this.closed) return;
        if (!this.sweptSpares) {
          this.sweptSpares = true;
          await this.reclaimDeadSpares();
        }
        this.spare = await this.claimFree(undefined);
      })
      // Best effort: without a spare, the next acquire claims a uid itself.
      .catch(() => undefined);
  }

  /** Stop keeping a spare and release the one held (its home and claim); acquire still works. */
  async close(): Promise<void> {
    this.closed = true;
    await this.chain;
    const held = this.spare;
    this.spare = undefined;
    if (held) await this.dropSpare(held);
  }

  /** Resolves once every operation queued so far (a spare's preparation too) has finished. */
  async whenIdle(): Promise<void> {
    await this.chain;
  }

  /** Read-only: the uid held as the spare, if any. */
  spareUid(): number | undefined {
    return this.spare?.uid;
  }

  /**
   * The spare becomes `agentId`'s: the claim names the agent first, then the home moves. On the
   * agent's start, so synchronous: five small system calls cost less than their trips through the
   * thread pool on a busy host.
   */
  private handOver(spare: AgentUser, agentId: string): AgentUser {
    const claim = this.claimPathOf(spare.uid);
    writeFileSync(join(claim, 'agent.part'), agentId);
    renameSync(join(claim, 'agent.part'), join(claim, 'agent'));
    rmSync(join(claim, 'holder'), { force: true });
    const home = this.homeOf(agentId);
    rmSync(home, { recursive: true, force: true });
    renameSync(spare.home, home);
    return { uid: spare.uid, gid: spare.gid, home };
  }

  private async dropSpare(spare: AgentUser): Promise<void> {
    await rm(spare.home, { recursive: true, force: true });
    await rm(this.claimPathOf(spare.uid), { recursive: true, force: true });
  }

  /** Free the spares whose holder process is gone (an orchestrator that crashed or was killed). */
  private async reclaimDeadSpares(): Promise<void> {
    for (const name of await readdir(this.claims).catch(() => [] as string[])) {
      const owner = await readFile(join(this.claims, name, 'agent'), 'utf8').catch(() => '');
      if (!owner.startsWith(SPARE_PREFIX)) continue;
      const holder = await readFile(join(this.claims, name, 'holder'), 'utf8').catch(() => '');
      if (holderAlive(holder)) continue;
      await this.dropSpare({ uid: Number(name), gid: Number(name), home: this.homeOf(owner) });
    }
  }

  /** Claim a free uid for `agentId`, or, without one, as a spare held by this process. */
  private async claimFree(agentId: string | undefined): Promise<AgentUser> {
    await ensureHomesRoot(this.root);
    await mkdir(this.claims, { recursive: true, mode: 0o700 });
    const busy = await uidsWithProcesses();
    for (let uid = this.first; uid < this.first + this.count; uid++) {
      if (busy.has(uid)) continue;
      const claim = this.claimPathOf(uid);
      try {
        await mkdir(claim);
      } catch {
        continue; // claimed by someone else
      }
      const owner = agentId ?? spareOwner(uid);
      // The holder before the owner: a claim naming a spare always says whose it is.
      if (agentId === undefined) await writeFile(join(claim, 'holder'), thisHolder());
      await writeFile(join(claim, 'agent'), owner);
      const home = this.homeOf(owner);
      await rm(home, { recursive: true, force: true });
      await mkdir(home, { mode: 0o700 });
      await chown(home, uid, uid);
      return { uid, gid: uid, home };
    }
    throw new Error(
      `no free agent uid in ${this.first}-${this.first + this.count - 1} (every one is claimed under ${this.claims})`,
    );
  }

  /** The uid claimed for `agentId`, read from the claims (survives a restart), if any. */
  async uidOf(agentId: string): Promise<number | undefined> {
    // No claims dir yet means no claims.
    for (const name of await readdir(this.claims).catch(() => [] as string[])) {
      const owner = await readFile(join(this.claims, name, 'agent'), 'utf8').catch(() => '');
      if (owner === agentId) return Number(name);
    }
    return undefined;
  }

  /** Drop the agent's home and its uid claim. Safe to call twice. */
  async release(agentId: string, uid?: number): Promise<void> {
    const claimed = uid ?? (await this.uidOf(agentId));
    await rm(this.homeOf(agentId), { recursive: true, force: true });
    if (claimed === undefined) return;
    // A crash in the middle of a hand-over leaves the spare's home under its old name.
    await rm(this.homeOf(spareOwner(claimed)), { recursive: true, force: true });
    await rm(this.claimPathOf(claimed), { recursive: true, force: true });
  }

  /**
   * Free the claims whose agent is gone: no live process runs as the uid and this host has no home
   * for the agent any more. A claim left by a crash between claiming and the home's mkdir is freed
   * here too, so a restart never leaks a uid.
   */
  async reclaimStale(isLive: (agentId: string) => boolean): Promise<number> {
    const busy = await uidsWithProcesses();
    let freed = 0;
    // No claims dir yet means no claims.
    for (const name of await readdir(this.claims).catch(() => [] as string[])) {
      const uid = Number(name);
      const owner = await readFile(join(this.claims, name, 'agent'), 'utf8').catch(() => '');
      if (busy.has(uid) || (owner && isLive(owner))) continue;
      // A spare is free again once the process holding it is gone, home or not.
      if (owner.startsWith(SPARE_PREFIX)) {
        if (uid === this.spare?.uid) continue;
        const holder = await readFile(join(this.claims, name, 'holder'), 'utf8').catch(() => '');
        if (holderAlive(holder)) continue;
        await this.dropSpare({ uid, gid: uid, home: this.homeOf(owner) });
        freed++;
        continue;
      }
      const hasHome = owner
        ? await stat(this.homeOf(owner)).then(
            () => true,
            () => false,
          )
        : false;
      if (hasHome) continue;
      await rm(join(this.claims, name), { recursive: true, force: true });
      freed++;
    }
    return freed;
  }
}

/**
 * Root's pool is shared by every root orchestrator on the host (the uid claims must be); another
 * user gets its own, which it can create and own even where root's already exists.
 */
export function defaultHomesRoot(uid: number | undefined = process.getuid?.()): string {
  return join(tmpdir(), uid === undefined || uid === 0 ? 'kici-agent-homes' : `kici-agent-homes-${uid}`);
}

/** Others may traverse the root to reach their own home, but not list it (chmod: umask may be 077). */
export async function ensureHomesRoot(root: string): Promise<void> {
  await mkdir(root, { recursive: true, mode: 0o711 });
  await chmod(root, 0o711);
}
