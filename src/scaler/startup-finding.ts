/**
 * What a start-up check finds and what it is given (startup-checks.ts runs them): a finding names
 * the file, the YAML path, the problem and the fix, so validate and serve word it the same way.
 */
import type { ScalerEntry } from '../config/index.js';
import type { StatfsFn } from './backends/registry.js';
import type { BackendDeps } from './backends/deps.js';

export interface CheckFinding {
  severity: 'error' | 'warning';
  file: string;
  /** Where in the YAML: `scalers[2].labelSets[0].binaryPath`. */
  path: string;
  problem: string;
  fix: string;
}

export function describeFinding(f: CheckFinding): string {
  return `${f.file}: ${f.path}: ${f.problem}. Fix: ${f.fix}`;
}

export interface StartupCheckOptions {
  configPath: string;
  /** The file each `scalers[i]` came from (drop-ins); the main file when absent. */
  scalerFiles?: readonly string[];
  /** The environment the orchestrator (and its tools) runs with. */
  env?: NodeJS.ProcessEnv;
  /**
   * `validate`: an engine that does not answer is a warning (it may be started before serve);
   * `serve`: it is an error, since the container backend cannot be built without it.
   */
  mode: 'validate' | 'serve';
  /** Ping a scaler's engine; the default connects as the backend does. */
  pingEngine?: (entry: ScalerEntry) => Promise<void>;
  /** Prove nft works (`nft list tables`); the default runs it. `false`: the firewall is injected. */
  probeNft?: ((sudo: boolean) => Promise<void>) | false;
  statfs?: StatfsFn;
  diskThresholdBytes?: number;
  /** What the bare-metal limits chooser asks of the host; probed when absent. */
  limitsProbes?: BackendDeps['limitsProbes'];
}

export type Finder = (entry: ScalerEntry, i: number, o: StartupCheckOptions) => Promise<CheckFinding[]>;

export function fileOf(o: StartupCheckOptions, i: number): string {
  return o.scalerFiles?.[i] ?? o.configPath;
}
