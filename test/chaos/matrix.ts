/**
 * The chaos table: fault × backend → jobs lost, jobs run twice, resources leaked (by the scaler
 * audit and, independently, from the host) and the reason the operator was shown. A cell nobody
 * ran says so; it never reads as a pass.
 */

export const FAULTS = [
  'engine outage',
  'nft flush ruleset',
  'PostgreSQL restart',
  'data-dir disk full',
  'wall clock ±1 h',
  'kill -9 orchestrator',
  'kill -9 cluster leader',
  'agent killed mid-step',
] as const;
export type Fault = (typeof FAULTS)[number];

export const BACKENDS = ['bare-metal', 'docker', 'podman', 'qemu', 'event'] as const;
export type Backend = (typeof BACKENDS)[number];

/** What one cell measured. */
export interface CellOutcome {
  jobs: number;
  /** Jobs that never reached a final state. */
  lost: number;
  /** Jobs whose step started more than once. */
  twice: number;
  /** Drift `scaler audit` still reported once the jobs settled. */
  leakedAudit: number;
  /** Agent and step processes (or containers, VMs) still on the host once the jobs settled. */
  leakedHost: number;
  /** What the operator saw for jobs that did not succeed (job reasons), or that all succeeded. */
  reason: string;
}

export type Cell =
  | { status: 'ran'; outcome: CellOutcome }
  | { status: 'error'; error: string }
  /** The fault does not exist for this backend (no engine, no firewall). */
  | { status: 'n/a'; why: string }
  | { status: 'not run'; why: string };

export function passed(c: Cell): boolean {
  if (c.status !== 'ran') return false;
  const o = c.outcome;
  return o.lost === 0 && o.twice === 0 && o.leakedAudit === 0 && o.leakedHost === 0;
}

function render(c: Cell | undefined): string {
  if (!c) return 'not run';
  switch (c.status) {
    case 'not run':
      return 'not run';
    case 'n/a':
      return 'n/a';
    case 'error':
      return `ERROR: ${c.error.replace(/\|/g, '/').slice(0, 80)}`;
    case 'ran': {
      const o = c.outcome;
      const verdict = passed(c) ? 'PASS' : 'FAIL';
      return `${verdict} ${o.jobs} jobs: lost ${o.lost}, twice ${o.twice}, leaked ${o.leakedAudit}/${o.leakedHost}; ${o.reason.replace(/\|/g, '/')}`;
    }
  }
}

const key = (fault: Fault, backend: Backend) => `${fault}\0${backend}`;

export class ChaosTable {
  private readonly cells = new Map<string, Cell>();

  set(fault: Fault, backend: Backend, cell: Cell): void {
    this.cells.set(key(fault, backend), cell);
  }

  get(fault: Fault, backend: Backend): Cell | undefined {
    return this.cells.get(key(fault, backend));
  }

  /** Markdown: a row per fault, a column per backend; "leaked a/h" is audit / host. */
  markdown(): string {
    const rows = [`| fault | ${BACKENDS.join(' | ')} |`, `|---|${BACKENDS.map(() => '---').join('|')}|`];
    for (const f of FAULTS)
      rows.push(`| ${f} | ${BACKENDS.map((b) => render(this.get(f, b))).join(' | ')} |`);
    return rows.join('\n');
  }

  /** Cells that ran and did not pass (an errored cell counts as failed). */
  failures(): string[] {
    const out: string[] = [];
    for (const f of FAULTS)
      for (const b of BACKENDS) {
        const c = this.get(f, b);
        if (c && (c.status === 'error' || (c.status === 'ran' && !passed(c)))) out.push(`${f} × ${b}`);
      }
    return out;
  }
}
