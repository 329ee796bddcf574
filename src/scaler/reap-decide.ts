/**
 * The event provision reaper's decision: a pure function of the spawn rows, which agents are
 * registered anywhere this instance can see, which peers it can see, and a monotonic clock. The
 * async shell (event-reaper.ts) gathers the input, carries the memory from one pass to the next,
 * and carries out the actions.
 */

export type ReapReason = 'heartbeat-timeout' | 'spawn-timeout' | 'job-complete';

/** One event spawn row, as the reaper reads it. */
export interface ReapRow {
  agentId: string;
  scalerName: string;
  /** The instance that provisioned it (null: a row from before ownership was recorded). */
  ownerInstanceId: string | null;
  /** The instance that adopted its agent, if one did. */
  adoptedBy: string | null;
  /** Its agent registered at least once (with its owner or an adopter). */
  registered: boolean;
  /** Time since the spawn (store's stamps). */
  ageMs: number;
  /** The job it was provisioned for has ended (a never-registered provision is then no failure). */
  boundJobEnded: boolean;
}

/** Another instance sharing the store, as its heartbeat row shows it. */
export interface PeerView {
  alive: boolean;
  /** Time since its last heartbeat; Infinity for a cleanly stopped instance. */
  silentMs: number;
}

export interface ReapWindows {
  spawnTimeoutMs: number;
  /** How long a provision held by a live instance may stay unseen before it counts as stranded. */
  strandedTimeoutMs: number;
  /** How long a provision must stay unseen, continuously, before any teardown. */
  flapGraceMs: number;
  /** How long after an attempt the same provision may be tried again. */
  reattemptIntervalMs: number;
}

export interface ReapInput {
  /** Monotonic time: absence clocks and attempts are measured on it. */
  nowMono: number;
  selfId: string;
  rows: readonly ReapRow[];
  /** Agents registered with this instance or with a peer it can see. */
  seen: ReadonlySet<string>;
  /** Every other instance with a row (self excluded). */
  peers: ReadonlyMap<string, PeerView>;
  /** Peers this instance has ever seen alive (plus any configured statically). */
  knownPeers: number;
  windows: ReapWindows;
}

/** What one leader term remembers between passes. */
export interface ReapMemory {
  /** agentId → when it was first found unseen (monotonic). */
  clocks: ReadonlyMap<string, number>;
  /** agentId → when a teardown was last attempted (monotonic). */
  attempts: ReadonlyMap<string, number>;
  blocked: boolean;
  /** Rows without an owner already warned about. */
  warnedUnowned: ReadonlySet<string>;
}

export type ReapAction =
  | { kind: 'blocked'; blocked: boolean; knownPeers: number }
  | { kind: 'clock-started'; agentId: string }
  | { kind: 'clock-cleared'; agentId: string; unseenMs: number }
  | { kind: 'unowned'; agentId: string }
  | {
      kind: 'reap';
      agentId: string;
      scalerName: string;
      reason: ReapReason;
      /** Who held it (adopter, registered owner, or the owner of a never-registered provision). */
      holder: string | null;
      unseenMs: number;
    };

export interface ReapDecision {
  memory: ReapMemory;
  actions: ReapAction[];
  /** Gauge: the partition guard holds. */
  blocked: boolean;
  /** Gauge: provisions unseen for at least the flap grace. */
  unseen: number;
}

export function emptyReapMemory(): ReapMemory {
  return { clocks: new Map(), attempts: new Map(), blocked: false, warnedUnowned: new Set() };
}

/** Is the instance that holds a provision still there to tear it down itself? */
function holderLive(holder: string, input: ReapInput): boolean {
  if (holder === input.selfId) return true;
  const peer = input.peers.get(holder);
  if (!peer) return false;
  return peer.alive || peer.silentMs < input.windows.flapGraceMs;
}

/** Is this row the reaper's business at all (an old enough or held provision)? */
function isCandidate(row: ReapRow, w: ReapWindows): boolean {
  return row.adoptedBy !== null || row.registered || row.ageMs >= w.spawnTimeoutMs;
}

/** What to do with one unseen candidate past the flap grace: a reason, or null to spare it. */
function verdict(row: ReapRow, unseenMs: number, input: ReapInput): ReapReason | 'unowned' | null {
  const holder = row.adoptedBy ?? (row.registered ? row.ownerInstanceId : null);
  if (holder !== null) {
    if (!holderLive(holder, input)) return 'heartbeat-timeout';
    return unseenMs >= input.windows.strandedTimeoutMs ? 'heartbeat-timeout' : null;
  }
  if (row.ownerInstanceId === null) return 'unowned';
  return row.boundJobEnded ? 'job-complete' : 'spawn-timeout';
}

export function decideReap(input: ReapInput, memory: ReapMemory): ReapDecision {
  const actions: ReapAction[] = [];
  const w = input.windows;
  const connected = [...input.peers.values()].filter((p) => p.alive).length;
  // Having met peers and reaching none of them now, this instance may be the one cut off: a
  // provision it cannot see may be alive and well on the far side.
  const blocked = input.knownPeers > 0 && connected === 0;
  if (blocked !== memory.blocked) actions.push({ kind: 'blocked', blocked, knownPeers: input.knownPeers });
  const present = new Set(input.rows.map((r) => r.agentId));
  const attempts = new Map([...memory.attempts].filter(([id]) => present.has(id)));
  const warnedUnowned = new Set([...memory.warnedUnowned].filter((id) => present.has(id)));
  if (blocked) {
    // Absence observed while cut off proves nothing: the clocks start again once peers are back.
    return { memory: { clocks: new Map(), attempts, blocked, warnedUnowned }, actions, blocked, unseen: 0 };
  }
  const clocks = new Map<string, number>();
  for (const row of input.rows) {
    if (!isCandidate(row, w)) continue;
    const since = memory.clocks.get(row.agentId);
    if (input.seen.has(row.agentId)) {
      if (since !== undefined)
        actions.push({ kind: 'clock-cleared', agentId: row.agentId, unseenMs: input.nowMono - since });
      continue;
    }
    if (since === undefined) {
      clocks.set(row.agentId, input.nowMono);
      actions.push({ kind: 'clock-started', agentId: row.agentId });
      continue;
    }
    clocks.set(row.agentId, since);
    const unseenMs = input.nowMono - since;
    if (unseenMs < w.flapGraceMs) continue;
    const v = verdict(row, unseenMs, input);
    if (v === null) continue;
    if (v === 'unowned') {
      if (!warnedUnowned.has(row.agentId)) actions.push({ kind: 'unowned', agentId: row.agentId });
      warnedUnowned.add(row.agentId);
      continue;
    }
    const last = attempts.get(row.agentId);
    if (last !== undefined && input.nowMono - last < w.reattemptIntervalMs) continue;
    attempts.set(row.agentId, input.nowMono);
    actions.push({
      kind: 'reap',
      agentId: row.agentId,
      scalerName: row.scalerName,
      reason: v,
      holder: row.adoptedBy ?? row.ownerInstanceId,
      unseenMs,
    });
  }
  const unseen = [...clocks.values()].filter((t) => input.nowMono - t >= w.flapGraceMs).length;
  return { memory: { clocks, attempts, blocked, warnedUnowned }, actions, blocked, unseen };
}
