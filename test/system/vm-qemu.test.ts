import { access, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { outputLines, submit } from '../helpers/jobs.js';
import { startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';
import { deleteLink, qemuPidsUnder, tapsOn, vmConfig } from '../helpers/vm.js';

/**
 * Issue #11 acceptance, system tier (netns kici-sys, real QEMU microvm under TCG): a job runs in a
 * VM whose agent registered over the bridge, and the VM leaves nothing behind.
 */
const BRIDGE = 'vmq-br0';
const SUBNET = '10.231.7';

let t: TestOrchestrator | undefined;
let base: string | undefined;
afterAll(async () => {
  await t?.stop();
  await deleteLink(BRIDGE);
  if (base) await rm(base, { recursive: true, force: true });
});

describe('VM backend with the qemu driver (real boots)', () => {
  it('runs a job in a micro-VM and tears the VM, TAP, lease and overlay down afterwards', async () => {
    base = await mkdtemp(join(tmpdir(), 'kici-vmq-'));
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      config: vmConfig({ name: 'vmq', bridge: BRIDGE, subnet: SUBNET, base }),
    });
    const started = Date.now();
    const [id] = await submit(t, {
      vm: {
        runsOn: ['linux', 'vmq'],
        steps: [
          {
            run: 'echo "hello from $(hostname)"; grep -o "kici.net=[^ ]*" /proc/cmdline; touch /probe && echo overlay-writable; ls /run/kici.env 2>&1 | head -1',
          },
        ],
      },
    });
    const job = await t.waitForJob(id!, undefined, 120_000);
    const lines = await outputLines(t, id!);
    expect(job.state, `${job.reason}\n${lines.join('\n')}`).toBe('succeeded');
    expect(job.agentId).toMatch(/^scaler-/);
    expect(lines).toContain(`kici.net=${SUBNET}.2,${SUBNET}.1,24`);
    expect(lines).toContain('overlay-writable');
    // The credentials file is gone once the agent has read it.
    expect(lines.some((l) => l.includes('No such file'))).toBe(true);
    const logs = await t.api<{ lines: { stream: string; line: string }[] }>('GET', `/api/v1/jobs/${id}/logs`);
    // The serial console reached the job's timeline as system lines.
    expect(logs.body.lines.some((l) => l.line.includes('kici-guest: starting agent'))).toBe(true);
    console.log(`vm job: submit -> succeeded in ${Date.now() - started} ms`);

    // Teardown: nothing of the VM is left.
    await eventually(async () => (await qemuPidsUnder(base!)).length === 0, 20_000, 'qemu gone');
    await eventually(async () => (await tapsOn(BRIDGE)).length === 0, 10_000, 'taps gone');
    const leases = await t.orch.store.db.selectFrom('ip_allocations').selectAll().execute();
    expect(leases).toEqual([]);
    await expect(access(join(base, 'firecracker', job.agentId!))).rejects.toThrow();
  });
});

async function eventually(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
