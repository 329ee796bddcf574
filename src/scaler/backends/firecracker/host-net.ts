import { execFile } from 'node:child_process';
import { createNftRunner, type NftRunner } from '../../../net/nft-runner.js';
import { resolveTool } from '../../../util/system-tools.js';
import { hostToolEnv } from '../../../util/host-tool-env.js';

/** Runs one host command; `requireSudo` scalers wrap it in `sudo -n`. Rejects with its stderr. */
export type CommandRunner = (cmd: string, args: string[]) => Promise<string>;

export function commandRunner(opts: {
  sudo: boolean;
  /** The orchestrator's environment: where tools are looked for; they run with hostToolEnv's part of it. */
  hostEnv: NodeJS.ProcessEnv;
  timeoutMs?: number;
}): CommandRunner {
  // Their messages are matched ("Cannot find device", "No such file"): in the C locale, whatever
  // language the host speaks, or a missing device would read as a failure.
  const env = { ...hostToolEnv(opts.hostEnv), LC_ALL: 'C' };
  return (cmd, args) =>
    new Promise((resolve, reject) => {
      // `ip` lives in /usr/sbin or /sbin, often not on a service's PATH.
      const tool = resolveTool(cmd, opts.hostEnv);
      const [file, argv] = opts.sudo ? ['sudo', ['-n', tool, ...args]] : [tool, args];
      execFile(file, argv, { timeout: opts.timeoutMs ?? 30_000, env }, (err, stdout, stderr) => {
        if (err) reject(new Error(`${cmd} ${args.join(' ')}: ${stderr.trim() || err.message}`));
        else resolve(stdout);
      });
    });
}

/**
 * The nft of a VM scaler (its isolation, and the host checks of `kici-admin firecracker` and
 * `diagnose`): like the other helpers, through `sudo -n` when asked and with hostToolEnv's part of
 * the orchestrator's environment; the runner itself puts it in the C locale.
 */
export function vmNftRunner(sudo: boolean, hostEnv: NodeJS.ProcessEnv): NftRunner {
  return createNftRunner({ sudo, env: hostToolEnv(hostEnv) });
}

/** TAP devices this backend creates: `kici-` + 8 hex characters (see tapNameFor). */
export const VM_TAP_PATTERN = /^kici-[0-9a-f]{8}$/;

/**
 * The address a bridge of ours is created with: locally administered, `0a:58` and then the four
 * octets of its gateway. A bridge whose address was never set takes the lowest MAC among its ports,
 * so it moved whenever a VM's TAP came or went, and the VMs already running went on sending to the
 * old one, dropped by the host, until their ARP entry was renewed: seconds of silence from their
 * agents. A set address is never recalculated. Derived rather than random, so a bridge made again
 * for the same network has the same one and a guest's neighbour entry stays right.
 */
export function bridgeMac(gateway: string): string {
  const octets = gateway.split('.').map(Number);
  if (octets.length !== 4 || octets.some((o) => !Number.isInteger(o) || o < 0 || o > 255))
    throw new Error(`bridge gateway ${gateway} is not an IPv4 address`);
  return ['0a', '58', ...octets.map((o) => o.toString(16).padStart(2, '0'))].join(':');
}

/** Bridge and TAP plumbing with `ip`. Bridges are never deleted: an operator's bridge outlives us. */
export class HostNet {
  constructor(private readonly run: CommandRunner) {}

  async bridgeExists(name: string): Promise<boolean> {
    return this.run('ip', ['link', 'show', 'dev', name]).then(
      () => true,
      () => false,
    );
  }

  /** Create the bridge with the gateway address when it is missing (autoProvisionHost). */
  async ensureBridge(name: string, gatewayCidr: string): Promise<'created' | 'present'> {
    if (await this.bridgeExists(name)) {
      const addrs = await this.run('ip', ['-o', '-4', 'addr', 'show', 'dev', name]);
      if (!addrs.includes(` ${gatewayCidr} `))
        await this.run('ip', ['addr', 'add', gatewayCidr, 'dev', name]);
      await this.run('ip', ['link', 'set', name, 'up']);
      return 'present';
    }
    const mac = bridgeMac(gatewayCidr.split('/')[0]!);
    await this.run('ip', ['link', 'add', name, 'address', mac, 'type', 'bridge']);
    await this.run('ip', ['addr', 'add', gatewayCidr, 'dev', name]);
    await this.run('ip', ['link', 'set', name, 'up']);
    return 'created';
  }

  /**
   * One TAP per VM on the bridge, with bridge-port isolation so VMs cannot reach each other at L2.
   * On any failure the TAP is removed again.
   */
  async addTap(tap: string, bridge: string): Promise<void> {
    await this.deleteTap(tap); // a leftover of a crashed run with the same name
    try {
      await this.run('ip', ['tuntap', 'add', 'dev', tap, 'mode', 'tap']);
      await this.run('ip', ['link', 'set', tap, 'master', bridge]);
      await this.run('ip', ['link', 'set', tap, 'type', 'bridge_slave', 'isolated', 'on']);
      await this.run('ip', ['link', 'set', tap, 'up']);
    } catch (err) {
      await this.deleteTap(tap);
      throw err;
    }
  }

  /** Idempotent. */
  async deleteTap(tap: string): Promise<void> {
    await this.run('ip', ['link', 'del', 'dev', tap]).catch((err: Error) => {
      if (!/Cannot find device|does not exist/.test(err.message)) throw err;
    });
  }

  /** Host interfaces that look like our TAPs. */
  async listTaps(): Promise<string[]> {
    const out = await this.run('ip', ['-o', 'link', 'show']);
    return out
      .split('\n')
      .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1])
      .filter((n): n is string => !!n && VM_TAP_PATTERN.test(n));
  }
}
