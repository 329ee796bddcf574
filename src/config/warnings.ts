/**
 * Things a valid config may still get wrong: keys that are silently ignored (typos in
 * non-strict blocks, settings for another backend type) and choices with a known cost.
 */
import { formatLocated, formatYamlPath, locate, type ConfigErrorContext } from './format-errors.js';
import { isPlainObject } from './loader.js';
import { quote, suggestKey } from './messages.js';
import type { ConfigSources } from './provenance.js';
import { warmSkipReason } from './warm-eligibility.js';
import { firecrackerNetworkSchema, scalerFileSchema, type ScalerConfig, type ScalerType } from './schema.js';

const ALL_LOCAL: ScalerType[] = ['container', 'bare-metal', 'firecracker'];

/** Entry fields that only one or some backend types read; elsewhere they are ignored. */
const ENTRY_FIELD_TYPES: Record<string, ScalerType[]> = {
  host: ['container', 'bare-metal'],
  socketPath: ['container', 'bare-metal'],
  runtime: ['container', 'bare-metal'],
  networkIsolation: ['container'],
  enforceCgroups: ['bare-metal'],
  requireSudo: ['firecracker', 'bare-metal'],
  firecrackerPath: ['firecracker'],
  vmm: ['firecracker'],
  qemuPath: ['firecracker'],
  initrdPath: ['firecracker'],
  jailerPath: ['firecracker'],
  kernelPath: ['firecracker'],
  chrootBaseDir: ['firecracker'],
  uid: ['firecracker'],
  gid: ['firecracker'],
  vcpuCount: ['firecracker'],
  memSizeMib: ['firecracker'],
  extraHosts: ALL_LOCAL,
  provisioningTargets: ['event'],
  claimTtlSeconds: ['event'],
  agentTokenTtlSeconds: ['event'],
};

const LABEL_SET_FIELD_TYPES: Record<string, ScalerType[]> = {
  binaryPath: ['bare-metal'],
  runAsUser: ['bare-metal'],
  trust: ['bare-metal'],
  volumes: ['container', 'bare-metal'],
  containerSocket: ['container', 'bare-metal'],
  rootfsPath: ['firecracker'],
  kernelPath: ['firecracker'],
  vcpuCount: ['firecracker'],
  memSizeMib: ['firecracker'],
  overlayDriveSizeMib: ['firecracker'],
};

const NETWORK_POLICY_KEYS = ['allowlist', 'denyAll', 'hostAccess'];

function unknownKeys(value: unknown, known: readonly string[]): string[] {
  return isPlainObject(value) ? Object.keys(value).filter((k) => !known.includes(k)) : [];
}

function ignoredKeyMessage(key: string, known: readonly string[], where: string): string {
  const hint = suggestKey(key, known);
  return `unknown key ${quote(key)} in ${where} is ignored${hint ? ` (did you mean "${hint}"?)` : ''}`;
}

function yamlWarnings(sources: ConfigSources): string[] {
  return sources.files.flatMap((f) =>
    f.fastWarnings
      ? f.fastWarnings.map((w) => `${f.file}: ${w}`)
      : f.doc.warnings.map((w) => {
          const pos = w.linePos?.[0];
          const text = (w.message.split('\n')[0] ?? '').replace(/ at line \d+, column \d+:?$/, '');
          return `${f.file}: ${pos ? `line ${pos.line}, column ${pos.col}: ` : ''}${text}`;
        }),
  );
}

function dropInWarnings(sources: ConfigSources): string[] {
  const out: string[] = [];
  for (const f of sources.files.filter((s) => s.dropIn)) {
    if (!isPlainObject(f.value) || !Array.isArray(f.value.scalers)) {
      out.push(`${f.file}: contributes no scalers (it has no "scalers" list)`);
    }
    for (const key of unknownKeys(f.value, ['scalers'])) {
      out.push(`${f.file}: ${formatYamlPath([key])}: ignored in a scalers.d file; only "scalers" is merged`);
    }
  }
  return out;
}

/** Every warning for a config that passed validation, each naming file and path. */
export function collectConfigWarnings(sources: ConfigSources, config: ScalerConfig): string[] {
  const ctx: ConfigErrorContext = { configPath: sources.configPath, sources };
  const warn = (path: PropertyKey[], message: string): string => formatLocated(locate(path, ctx), message);
  const out = [...yamlWarnings(sources), ...dropInWarnings(sources)];
  const raw = isPlainObject(sources.merged) ? sources.merged : {};

  const topKeys = Object.keys(scalerFileSchema.shape);
  for (const key of unknownKeys(raw, topKeys))
    out.push(warn([key], ignoredKeyMessage(key, topKeys, 'the top level')));
  for (const key of unknownKeys(raw.defaults, ['resources'])) {
    out.push(warn(['defaults', key], ignoredKeyMessage(key, ['resources'], 'defaults')));
  }
  const fcKeys = Object.keys(firecrackerNetworkSchema.shape);
  for (const key of unknownKeys(raw.firecracker, fcKeys)) {
    out.push(warn(['firecracker', key], ignoredKeyMessage(key, fcKeys, 'firecracker')));
  }

  const rawScalers = Array.isArray(raw.scalers) ? raw.scalers : [];
  config.scalers.forEach((entry, i) => {
    const rawEntry = isPlainObject(rawScalers[i]) ? rawScalers[i] : {};
    for (const [field, types] of Object.entries(ENTRY_FIELD_TYPES)) {
      if (field in rawEntry && !types.includes(entry.type)) {
        out.push(
          warn(['scalers', i, field], `ignored by ${entry.type} scalers (used by ${types.join(', ')})`),
        );
      }
    }
    if (entry.type === 'container' && entry.networkIsolation === false) {
      out.push(
        warn(
          ['scalers', i, 'networkIsolation'],
          'agents of this scaler can reach private networks and the host',
        ),
      );
    }
    const warm = entry.warmPool;
    if (warm?.enabled && warm.size === 0)
      out.push(warn(['scalers', i, 'warmPool'], 'enabled with size 0: nothing is kept warm'));
    if (warm?.enabled && warm.size > entry.maxAgents) {
      out.push(
        warn(
          ['scalers', i, 'warmPool', 'size'],
          `is larger than maxAgents (${entry.maxAgents}); the cap wins`,
        ),
      );
    }
    const rawSets = Array.isArray(rawEntry.labelSets) ? rawEntry.labelSets : [];
    entry.labelSets.forEach((set, j) => {
      const rawSet = isPlainObject(rawSets[j]) ? rawSets[j] : {};
      const at = (...rest: PropertyKey[]): PropertyKey[] => ['scalers', i, 'labelSets', j, ...rest];
      for (const [field, types] of Object.entries(LABEL_SET_FIELD_TYPES)) {
        if (field in rawSet && !types.includes(entry.type)) {
          out.push(warn(at(field), `ignored by ${entry.type} scalers (used by ${types.join(', ')})`));
        }
      }
      for (const key of unknownKeys(rawSet.networkPolicy, NETWORK_POLICY_KEYS)) {
        out.push(
          warn(at('networkPolicy', key), ignoredKeyMessage(key, NETWORK_POLICY_KEYS, 'networkPolicy')),
        );
      }
      if (set.containerSocket) {
        out.push(
          warn(
            at('containerSocket'),
            'mounting the runtime socket gives jobs root on the host; trusted workloads only',
          ),
        );
      }
      if (entry.type === 'bare-metal' && set.trust === 'host' && set.binaryPath !== undefined) {
        out.push(
          warn(
            at('trust'),
            "jobs run unconfined, with the orchestrator user's access to its data dir, admin token and home; trusted builds only",
          ),
        );
      }
      if (
        entry.type === 'bare-metal' &&
        set.binaryPath !== undefined &&
        set.image === undefined &&
        set.networkPolicy
      ) {
        out.push(
          warn(
            at('networkPolicy'),
            'cannot be enforced for bare-metal agent processes (only in job-image mode)',
          ),
        );
      }
      const skip = warm?.enabled && warm.size > 0 ? warmSkipReason(set, config.defaults) : undefined;
      if (skip) out.push(warn(at('resources'), `the warm pool skips this label set: ${skip}`));
    });
  });
  return out;
}
