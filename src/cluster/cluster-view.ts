/**
 * One cluster view: each instance publishes its own part of `scaler status`, `diagnose` and
 * `agent list`; the instance that answers puts its own (live) part first and the peers' published
 * parts after it, every row marked with the instance it belongs to and whether that one is alive.
 * Pure: the shapes of the rows are the routes' own, only the marks are added here.
 */

/** Whether an instance beats (alive), stopped cleanly, or went silent without stopping (dead). */
export type InstanceState = 'alive' | 'dead' | 'stopped';

/** What one instance publishes of its own state, in the shapes its routes answer with. */
export interface InstancePart {
  scalerStatus: ScalerStatusPart;
  diagnose: DiagnosePart;
  agents: AgentRow[];
}

export interface ScalerStatusPart {
  configured: boolean;
  scalers: object[];
  [k: string]: unknown;
}

export interface DiagnosePart {
  configured: boolean;
  healthy: boolean;
  scalers: object[];
  checks?: object[];
  [k: string]: unknown;
}

export interface AgentRow {
  id: string;
  [k: string]: unknown;
}

/** A peer's part as read from the database, with its presence. */
export interface PeerPart {
  instance: string;
  state: InstanceState;
  heartbeatAgeMs: number;
  part: InstancePart;
}

/** The marks every merged row carries. */
export interface InstanceMark {
  instance: string;
  instanceState: InstanceState;
}

type Marked<T> = T & InstanceMark;

/** Peers worth showing: a cleanly stopped instance has no part any more; alive ones before dead ones. */
function shown(peers: readonly PeerPart[], self: string): PeerPart[] {
  const live = peers.filter((p) => p.instance !== self && p.state !== 'stopped');
  return [...live.filter((p) => p.state === 'alive'), ...live.filter((p) => p.state !== 'alive')];
}

function mark<T extends object>(
  rows: readonly T[],
  instance: string,
  instanceState: InstanceState,
): Marked<T>[] {
  return rows.map((r) => ({ ...r, instance, instanceState }));
}

/** Own rows first, then each shown peer's. */
function mergeRows<T extends object>(
  self: string,
  own: readonly T[],
  peers: readonly PeerPart[],
  pick: (p: InstancePart) => readonly T[] | undefined,
): Marked<T>[] {
  return [
    ...mark(own, self, 'alive'),
    ...shown(peers, self).flatMap((p) => mark(pick(p.part) ?? [], p.instance, p.state)),
  ];
}

/**
 * Every instance's agents. An agent that moved (its instance died, it came back elsewhere) may
 * still be in the dead instance's last part: the row from the instance that is alive wins.
 */
export function mergeAgents<T extends AgentRow>(
  self: string,
  own: readonly T[],
  peers: readonly PeerPart[],
): Marked<T>[] {
  const seen = new Set<string>();
  const out: Marked<T>[] = [];
  for (const row of mergeRows(self, own, peers, (p) => p.agents as unknown as T[])) {
    if (seen.has(row.id)) continue;
    seen.add(row.id);
    out.push(row);
  }
  return out;
}

/** Each instance's totals (the top-level figures of its own status), for the per-instance lines. */
function totals(s: ScalerStatusPart): Record<string, unknown> {
  const { scalers: _rows, ...rest } = s;
  return rest;
}

/**
 * Every instance's scaler rows. The top level stays the answering instance's own figures (as on a
 * single instance); `instances` lists each instance's figures.
 */
export function mergeScalerStatus<T extends ScalerStatusPart>(
  self: string,
  own: T,
  peers: readonly PeerPart[],
): Omit<T, 'scalers'> & { scalers: Marked<object>[]; instances: Marked<Record<string, unknown>>[] } {
  const others = shown(peers, self);
  return {
    ...own,
    configured: own.configured || others.some((p) => p.part.scalerStatus.configured),
    scalers: mergeRows(self, own.scalers, peers, (p) => p.scalerStatus.scalers),
    instances: [
      { ...totals(own), instance: self, instanceState: 'alive' as const },
      ...others.map((p) => ({
        ...totals(p.part.scalerStatus),
        instance: p.instance,
        instanceState: p.state,
      })),
    ],
  };
}

/**
 * Every instance's diagnosis. Health is judged on the instances that are alive; a dead one adds a
 * WARN row (its part is as it last published it), since a crashed instance that is never started
 * again should not leave diagnose failing for ever.
 */
export function mergeDiagnose<T extends DiagnosePart>(
  self: string,
  own: T,
  peers: readonly PeerPart[],
): Omit<T, 'scalers' | 'checks'> & { scalers: Marked<object>[]; checks: Marked<object>[] } {
  const others = shown(peers, self);
  const deadRows = others
    .filter((p) => p.state !== 'alive')
    .map((p) => ({
      name: `instance:${p.instance}`,
      status: 'WARN',
      message: `instance ${p.instance} is ${p.state} (no heartbeat for ${Math.round(p.heartbeatAgeMs / 1000)}s); its rows are as it last published them`,
      instance: p.instance,
      instanceState: p.state,
    }));
  return {
    ...own,
    configured: own.configured || others.some((p) => p.part.diagnose.configured),
    healthy: own.healthy && others.every((p) => p.state !== 'alive' || p.part.diagnose.healthy),
    scalers: mergeRows(self, own.scalers, peers, (p) => p.diagnose.scalers),
    checks: [...mergeRows(self, own.checks ?? [], peers, (p) => p.diagnose.checks), ...deadRows],
  };
}

/** Fields that move with the clock alone (durations, and stamps placed back from now by one). */
const CLOCK_FIELDS = new Set([
  'idleMs',
  'uptimeMs',
  'lastSeenAt',
  'connectedAt',
  'retryInMs',
  'liftsAt',
  'retiringForMs',
]);

/**
 * What a part says apart from the passing of time: two parts with the same fingerprint differ
 * only in durations, so the newer need not be written at once.
 */
export function partFingerprint(part: unknown): string {
  return JSON.stringify(part, (key, value: unknown) => (CLOCK_FIELDS.has(key) ? undefined : value));
}

/** A part whose only news is the time is still rewritten every this many beats (durations stay near). */
export const PART_REFRESH_BEATS = 6;
