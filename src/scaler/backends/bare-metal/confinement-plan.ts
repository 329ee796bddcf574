import { normalizeLabelSet, type LabelSetConfig, type ScalerEntry } from '../../../config/index.js';
import {
  chooseConfinement,
  modeParts,
  type ConfinementChoice,
  type ConfinementMode,
  type HostFacts,
} from './confinement.js';
import { sandboxRequested } from './tools.js';
import { onPath, othersCannotRun } from './host-probe.js';
import { isAbsolute, resolve } from 'node:path';

/** One process-mode label set's confinement, as chosen for the host. */
export interface LabelSetConfinement {
  labelSet: string;
  mode: ConfinementMode;
  chosen: 'auto' | 'explicit';
  why: string;
}

export interface ConfinementPlan {
  /** Every process-mode label set (job-image sets run in containers and are not listed). */
  sets: LabelSetConfinement[];
  /** One line per label set the host cannot confine, naming the fix; empty when all can run. */
  errors: string[];
  /** The same, as the label set's field, the problem and the fix (for `scaler validate`). */
  problems: [field: string, problem: string, fix: string][];
}

/** Pure: the confinement of each of `entry`'s process-mode label sets on a host with `facts`. */
export function planConfinement(
  entry: ScalerEntry,
  facts: HostFacts,
  hostEnv: NodeJS.ProcessEnv,
): ConfinementPlan {
  const sets: LabelSetConfinement[] = [];
  const errors: string[] = [];
  const problems: [string, string, string][] = [];
  entry.labelSets.forEach((ls, i) => {
    if (!ls.binaryPath) return;
    const labelSet = normalizeLabelSet(ls.labels);
    const choice: ConfinementChoice = chooseConfinement(facts, {
      runAsUser: ls.runAsUser,
      sandbox: sandboxRequested(ls, hostEnv),
      trust: ls.trust,
    });
    if (choice.ok) sets.push({ labelSet, mode: choice.mode, chosen: choice.chosen, why: choice.why });
    else {
      errors.push(
        `scaler "${entry.name}" labelSets[${i}] [${labelSet}]: ${choice.problem}; fix: ${choice.fix}`,
      );
      problems.push([
        `labelSets[${i}]`,
        `scaler "${entry.name}" [${labelSet}]: ${choice.problem}`,
        choice.fix,
      ]);
    }
  });
  return { sets, errors, problems };
}

/** The mode a label set's agents start in; a set the plan does not know is refused, never unconfined. */
export function modeIn(plan: ConfinementPlan, ls: LabelSetConfig): ConfinementMode {
  const key = normalizeLabelSet(ls.labels);
  const found = plan.sets.find((s) => s.labelSet === key);
  if (!found) throw new Error(`label set [${key}] has no confinement chosen for this host`);
  return found.mode;
}

const MODE_WORDS: Record<ConfinementMode, string> = {
  users: 'per-agent users',
  sandbox: 'the bubblewrap sandbox',
  'users+sandbox': 'per-agent users inside the bubblewrap sandbox',
  host: 'nothing (trust: host)',
};

/** The start-up line for one label set: which mechanism confines its jobs, and why. */
export function describeConfinement(scaler: string, s: LabelSetConfinement): string {
  return `scaler "${scaler}" label set [${s.labelSet}]: jobs are confined by ${MODE_WORDS[s.mode]} (${s.chosen}: ${s.why})`;
}

/** The risk `scaler status` and diagnose show for an unconfined label set. */
export function hostTrustRisk(scaler: string, s: LabelSetConfinement): string {
  return `scaler "${scaler}" label set [${s.labelSet}] runs jobs unconfined (trust: host): a job can read the orchestrator's data dir and admin token and act as the operator`;
}

/** Per-agent users run the agent binary and node under their own uids: both must be open to them. */
export function agentsCannotRun(
  entry: ScalerEntry,
  plan: ConfinementPlan,
  baseDir: string,
  hostEnv: NodeJS.ProcessEnv,
): string[] {
  const out: string[] = [];
  const node = onPath('node', hostEnv.PATH);
  entry.labelSets.forEach((ls, i) => {
    const set = plan.sets.find((s) => s.labelSet === normalizeLabelSet(ls.labels));
    if (!ls.binaryPath || !set || !modeParts(set.mode).user) return;
    const binary = isAbsolute(ls.binaryPath) ? ls.binaryPath : resolve(baseDir, ls.binaryPath);
    for (const [what, file] of [
      ['the agent binary', binary],
      ['node', node],
    ] as const) {
      const why = file ? othersCannotRun(file) : undefined;
      if (why)
        out.push(
          `scaler "${entry.name}" labelSets[${i}] [${set.labelSet}]: agents run as their own uids, which cannot run ${what} ${file}: ${why}; install it where every user can read it (e.g. under /usr/local or /opt)`,
        );
    }
  });
  return out;
}
