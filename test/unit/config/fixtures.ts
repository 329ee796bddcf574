/** Minimal valid inputs and parse helpers shared by the config tests. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  createScalerFileSchema,
  formatYamlPath,
  SCALER_PARSE_PARAMS,
  scalerFileSchema,
  type ScalerConfig,
  type ScalerType,
} from '../../../src/config/index.js';

type Obj = Record<string, unknown>;

/** The smallest entry of each type that validates. */
export function minimalEntry(type: ScalerType, name = `${type}-pool`): Obj {
  const base: Obj = { name, type, maxAgents: 2 };
  switch (type) {
    case 'container':
      return { ...base, labelSets: [{ labels: ['linux', name], image: 'agent:1' }] };
    case 'bare-metal':
      return { ...base, labelSets: [{ labels: ['linux', name], binaryPath: '/usr/bin/kici-agent' }] };
    case 'firecracker':
      return {
        ...base,
        firecrackerPath: '/fc',
        jailerPath: '/jailer',
        kernelPath: '/vmlinux',
        uid: 1000,
        gid: 1000,
        labelSets: [{ labels: ['linux', name], rootfsPath: '/rootfs.ext4' }],
      };
    case 'event':
      return {
        ...base,
        provisioningTargets: ['job:provision.yaml'],
        labelSets: [{ labels: ['linux', name] }],
      };
  }
}

export function fileWith(...scalers: Obj[]): Obj {
  return { version: 1, scalers };
}

export interface FlatIssue {
  path: string;
  message: string;
}

export function parseFile(input: unknown, hostPlatform?: NodeJS.Platform) {
  const schema = hostPlatform ? createScalerFileSchema({ hostPlatform }) : scalerFileSchema;
  return schema.safeParse(input, SCALER_PARSE_PARAMS);
}

export function issuesOf(input: unknown, hostPlatform?: NodeJS.Platform): FlatIssue[] {
  const result = parseFile(input, hostPlatform);
  return result.success
    ? []
    : result.error.issues.map((i) => ({ path: formatYamlPath(i.path), message: i.message }));
}

export function parsedOk(input: unknown): ScalerConfig {
  const result = parseFile(input);
  if (!result.success)
    throw new Error(`expected a valid config: ${JSON.stringify(result.error.issues, null, 2)}`);
  return result.data;
}

/** A fresh temp dir for a test, removed by the returned cleanup. */
export async function tempDir(
  prefix = 'kici-config-',
): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/** Rejection expectation: an issue at `path` whose message contains `message`. */
export interface Rejects {
  path: string;
  message: string;
}

export function expectIssue(issues: FlatIssue[], want: Rejects): void {
  const hit = issues.find((i) => i.path === want.path && i.message.includes(want.message));
  if (!hit) {
    throw new Error(
      `no issue at ${want.path} containing ${JSON.stringify(want.message)}; got:\n${JSON.stringify(issues, null, 2)}`,
    );
  }
}
