/**
 * Chaos cells on the micro-VM backend (QEMU): a real `serve` process listening on every address so
 * the guests reach it through their bridge, its scaler on a bridge, subnet and rule-set table of
 * its own so it does not collide with the other VM suites sharing the namespace. A guest cannot
 * see a host file, so a step is held by a gate it asks over HTTP on the bridge's gateway (its label
 * set's firewall admits that port): the fault lands while every job runs, however slowly the guests
 * boot, and the steps end as soon as the test opens the gate.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { CellOutcome, Fault } from './matrix.js';
import { runServeCell, type ServeCellSpec } from './serve-cell.js';
import { httpGate, type HttpGate } from '../helpers/http-gate.js';
import { deleteTable, ruledAddresses } from '../helpers/nft-host.js';
import { deleteLink, qemuPidsUnder, tapsOn, vmConfig } from '../helpers/vm.js';

const exec = promisify(execFile);
/** A slot's own scaler name, bridge, rule-set table and subnet, so two cells can run side by side. */
function slotNet(slot: number) {
  const name = `vxc${slot}`;
  return { name, bridge: `${name}-br0`, table: `${name}-t`, subnet: `10.231.${14 + slot}` };
}
type SlotNet = ReturnType<typeof slotNet>;

export const VM_FAULTS: readonly Fault[] = [
  'nft flush ruleset',
  'agent killed mid-step',
  'wall clock ±1 h',
  'kill -9 orchestrator',
  'PostgreSQL restart',
  'data-dir disk full',
  'kill -9 cluster leader',
];

async function vmDirs(base: string): Promise<string[]> {
  return readdir(join(base, 'firecracker')).catch(() => []);
}

/** Remove everything of this scaler from the host: VMs, TAPs, bridge, rule sets, directories. */
async function sweep(base: string, net: SlotNet): Promise<void> {
  for (const pid of await qemuPidsUnder(base)) process.kill(pid, 'SIGKILL');
  for (const tap of await tapsOn(net.bridge)) await deleteLink(tap);
  await deleteLink(net.bridge);
  await exec('nft', ['delete', 'table', 'inet', net.table]).catch(() => {});
}

export function vmSpec(base: string, net: SlotNet, gate: HttpGate): ServeCellSpec {
  const config = vmConfig({ ...net, base, maxAgents: 1 });
  const [labelSet] = config.scalers[0]!.labelSets;
  const gateHost = `${net.subnet}.1`;
  return {
    config: {
      ...config,
      globalMaxAgents: 1,
      scalers: [
        {
          ...config.scalers[0]!,
          labelSets: [{ ...labelSet!, networkPolicy: { hostAccess: [`${gateHost}:${gate.port}`] } }],
        },
      ],
    },
    host: '0.0.0.0',
    // One guest per cell: a guest boots under software emulation where KVM cannot run one, and
    // the burst's concurrency is what the other columns show.
    jobs: 1,
    // A guest booting under emulation beside the rest of the system tier on a 2-core host: one run
    // (load average 25) saw a guest still booting after 240 s.
    runningTimeoutMs: 360_000,
    runsOn: ['linux', net.name],
    // Starting serve probes whether KVM can boot a guest, slow on a busy host.
    readyTimeoutMs: 180_000,
    step: () => `echo chaos-start; ${gate.wait(gateHost)}; echo chaos-end`,
    release: () => Promise.resolve(gate.open()),
    starts: (h, ids) =>
      Promise.all(ids.map(async (id) => (await h.log(id)).filter((l) => l === 'chaos-start').length)),
    // VMs still running, their TAPs, and their directories (overlay, sockets) on the host.
    hostLeft: async () =>
      (await qemuPidsUnder(base)).length + (await tapsOn(net.bridge)).length + (await vmDirs(base)).length,
    // The guest's agent cannot be reached from the host on its own: the VM process goes, and the
    // agent with it, mid-step.
    async killAgent() {
      const [victim] = await qemuPidsUnder(base);
      process.kill(victim!, 'SIGKILL');
    },
    // The slot's table is its own: the whole of it goes, as a `nft flush ruleset` takes it.
    async flushRules() {
      const ips = await ruledAddresses(net.table);
      await deleteTable(net.table);
      return ips;
    },
    rulesBack: async (ips) => {
      const now = new Set(await ruledAddresses(net.table));
      return ips.every((ip) => now.has(ip));
    },
    clockSteps: ['+1h', '-1h'],
    cleanup: () => sweep(base, net),
  };
}

/**
 * The slots cells may run in at once (each its own bridge, subnet and table). One: an emulated
 * guest keeps a core busy while it boots, and three at once beside the other lanes and suites
 * starved serve starts and guest boots past their deadlines on a 2-core host (a CI run with
 * load average 11). A second slot is one more entry here.
 */
export const VM_SLOTS = [0] as const;

/** One cell in `slot`: cells in different slots share nothing and may run at once. */
export async function runVmCell(fault: Fault, slot = 0): Promise<CellOutcome> {
  const net = slotNet(slot);
  const base = await mkdtemp(join(tmpdir(), 'kici-vxc-'));
  const gate = await httpGate();
  try {
    await sweep(base, net);
    return await runServeCell(fault, vmSpec(base, net, gate), randomBytes(4).toString('hex'));
  } finally {
    gate.open();
    await sweep(base, net);
    await gate.close();
    await rm(base, { recursive: true, force: true });
  }
}
