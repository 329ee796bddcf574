/**
 * The agent firewall as the host sees it, read and damaged with the `nft` command itself (not the
 * orchestrator's code): for the chaos cells that flush rules under running agents and then wait for
 * the orchestrator to put them back.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const exec = promisify(execFile);

type Listed = Record<string, { name?: string; chain?: string; elem?: unknown[] }>;

/**
 * Addresses that have rules in force in `table`: a key in both verdict maps and both of their own
 * chains holding rules. None when the table is gone.
 */
export async function ruledAddresses(table: string): Promise<string[]> {
  let out: string;
  try {
    out = (await exec('nft', ['-j', 'list', 'table', 'inet', table])).stdout;
  } catch {
    return [];
  }
  const objects = (JSON.parse(out) as { nftables: Listed[] }).nftables;
  const rules = new Map<string, number>();
  const maps = new Map<string, Set<string>>();
  for (const o of objects) {
    if (o.rule?.chain) rules.set(o.rule.chain, (rules.get(o.rule.chain) ?? 0) + 1);
    if (o.map?.name)
      maps.set(
        o.map.name,
        new Set((o.map.elem ?? []).map((e) => (Array.isArray(e) ? String(e[0]) : String(e)))),
      );
  }
  const both = [...(maps.get('agent_fwd') ?? [])].filter((ip) => maps.get('agent_in')?.has(ip));
  return both.filter((ip) => {
    const id = ip.replaceAll('.', '_');
    return (rules.get(`kf_${id}`) ?? 0) > 0 && (rules.get(`ki_${id}`) ?? 0) > 0;
  });
}

/** What `nft flush ruleset` does to one table: it is gone, with every chain, map and rule in it. */
export async function deleteTable(table: string): Promise<void> {
  await exec('nft', ['delete', 'table', 'inet', table]);
}

/**
 * Flush these addresses' rules (their map elements and their chains' rules) and nothing else in
 * `table`: for a table other users share, where deleting it would reach their agents too.
 */
export async function flushAddresses(table: string, ips: string[]): Promise<void> {
  // Something already gone (the whole table, if another user of it dropped it meanwhile) is flushed.
  const nft = (args: string[]) =>
    exec('nft', args).catch((err: unknown) => {
      if (!/No such file or directory/.test(String((err as { stderr?: string }).stderr))) throw err;
    });
  for (const ip of ips) {
    const id = ip.replaceAll('.', '_');
    await nft(['delete', 'element', 'inet', table, 'agent_fwd', `{ ${ip} }`]);
    await nft(['delete', 'element', 'inet', table, 'agent_in', `{ ${ip} }`]);
    await nft(['flush', 'chain', 'inet', table, `kf_${id}`]);
    await nft(['flush', 'chain', 'inet', table, `ki_${id}`]);
  }
}
