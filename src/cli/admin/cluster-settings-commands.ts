/**
 * `kici-admin cluster-settings show | set`: settings an admin changes for every orchestrator on one
 * database at once, without a restart. A cluster-wide value overrides each instance's own flag or
 * variable; `default` clears it, so each instance uses its own again.
 */
import type { Command } from 'commander';
import type { ClusterSettingView } from '../../cluster/live-settings.js';
import {
  CLUSTER_SETTING_KEYS,
  clusterKeyOf,
  formatClusterValue,
  parseClusterValue,
  type ClusterChanges,
} from '../../config/cluster-settings.js';
import { flagProperty } from '../../config/scaler-settings.js';
import { UsageError } from '../../util/errors.js';
import { printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

export function renderClusterSettings(rows: readonly ClusterSettingView[]): string {
  return table(
    ['SETTING', 'CLUSTER', 'INSTANCE', 'IN FORCE', 'MIN'],
    rows.map((r) => [r.key, formatClusterValue(r.value), r.instanceValue, r.effective, r.min]),
  );
}

/** The change the command line asks for: `KEY VALUE` and/or one `--<key> VALUE` per setting. */
export function changesFrom(
  key: string | undefined,
  value: string | undefined,
  flags: Record<string, unknown>,
): ClusterChanges {
  const pairs: [string, string][] = [];
  if (key !== undefined) {
    if (value === undefined)
      throw new UsageError(`${key}: give a value (a whole number, or "default" to clear it)`);
    pairs.push([key, value]);
  }
  for (const k of CLUSTER_SETTING_KEYS) {
    const v = flags[flagProperty(k.replace(/_/g, '-'))];
    if (typeof v === 'string') pairs.push([k, v]);
  }
  if (!pairs.length)
    throw new UsageError(`name a setting and its value (one of: ${CLUSTER_SETTING_KEYS.join(', ')})`);
  const changes: ClusterChanges = {};
  const problems: string[] = [];
  for (const [name, raw] of pairs) {
    const k = clusterKeyOf(name);
    if (!k) {
      problems.push(`${name}: not a cluster setting (known: ${CLUSTER_SETTING_KEYS.join(', ')})`);
      continue;
    }
    const parsed = parseClusterValue(k, raw);
    if (parsed.ok) changes[k] = parsed.value;
    else problems.push(parsed.problem);
  }
  if (problems.length) throw new UsageError(problems.join('; '), problems);
  return changes;
}

export function registerClusterSettingsCommands(
  program: Command,
  client: (c: Command) => Promise<AdminClient>,
): void {
  const cs = program
    .command('cluster-settings')
    .description('settings changed for every orchestrator on the database at once, without a restart');
  cs.command('show')
    .description("each setting: its cluster-wide value, this instance's own, and the one in force")
    .option('--json', 'machine-readable output')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const r = await (
        await client(cmd)
      ).request<{ settings: ClusterSettingView[] }>('GET', '/api/v1/cluster/settings');
      if (o.json) return printJson(r);
      process.stdout.write(renderClusterSettings(r.settings) + '\n');
    });
  const set = cs
    .command('set [key] [value]')
    .description('give settings a cluster-wide value ("default" clears one); admin only')
    .option('--json', 'machine-readable output');
  for (const k of CLUSTER_SETTING_KEYS) set.option(`--${k.replace(/_/g, '-')} <value>`, `set ${k}`);
  set.action(
    async (key: string | undefined, value: string | undefined, o: Record<string, unknown>, cmd: Command) => {
      const values = changesFrom(key, value, o);
      const r = await (
        await client(cmd)
      ).request<{ settings: ClusterSettingView[] }>('PUT', '/api/v1/cluster/settings', { values });
      if (o.json) return printJson(r);
      process.stdout.write(renderClusterSettings(r.settings) + '\n');
    },
  );
}
