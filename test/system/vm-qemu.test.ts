import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { outputLines, submit } from '../helpers/jobs.js';
import { startTestOrchestrator, type JobBody, type TestOrchestrator } from '../helpers/orchestrator.js';
import { deleteLink, qemuPidsUnder, tapsOn, vmConfig } from '../helpers/vm.js';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/**
 * System tier (netns kici-sys, real QEMU microvm under TCG): a job runs in a VM whose agent
 * registered over the bridge, and the VM leaves nothing behind.
 */
const BRIDGE = 'vmq-br0';
const SUBNET = '10.231.7';
const TABLE = 'vmq-t';
/** Two hosts the test attaches to its netns: an RFC1918 one (must be unreachable) and a public one. */
const LAN = { ns: 'vmq-lan', link: 'vmq-lan0', host: '10.231.97.1', peer: '10.231.97.2' };
const PUB = { ns: 'vmq-pub', link: 'vmq-pub0', host: '203.0.113.1', peer: '203.0.113.2' };
const PORT = 8089;

let t: TestOrchestrator | undefined;
let t2: TestOrchestrator | undefined;
let base: string | undefined;
let forwardBefore: string | undefined;
const servers: ChildProcess[] = [];
afterAll(async () => {
  await t?.stop();
  await t2?.stop();
  await deleteLink('vmd-br0');
  await exec('nft', ['delete', 'table', 'inet', 'vmd-t']).catch(() => {});
  for (const s of servers) s.kill('SIGKILL');
  for (const h of [LAN, PUB]) await exec('ip', ['netns', 'del', h.ns]).catch(() => {});
  await deleteLink(BRIDGE);
  await exec('nft', ['delete', 'table', 'inet', TABLE]).catch(() => {});
  if (forwardBefore !== undefined) await writeFile('/proc/sys/net/ipv4/ip_forward', forwardBefore);
  if (base) await rm(base, { recursive: true, force: true });
});

/**
 * A step that prints the body at `url`, or "unreachable" (refused, or no answer in 10 s: a dropped
 * SYN). Node's http module, not fetch: undici's first load alone takes seconds under TCG.
 */
const get = (url: string) =>
  `node -e 'const q=require("http").get(process.argv[1],(r)=>{let b="";r.on("data",(d)=>(b+=d));r.on("end",()=>console.log(b))});q.on("error",()=>console.log("unreachable"));q.setTimeout(10000,()=>{console.log("unreachable");process.exit(0)})' ${url}`;

/** A namespace behind a veth from ours, with an HTTP server that answers "<ns>-ok". */
async function attachHost(h: typeof LAN): Promise<void> {
  await exec('ip', ['netns', 'add', h.ns]);
  await exec('ip', ['link', 'add', h.link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', h.ns]);
  await exec('ip', ['addr', 'add', `${h.host}/24`, 'dev', h.link]);
  await exec('ip', ['link', 'set', h.link, 'up']);
  for (const args of [
    ['addr', 'add', `${h.peer}/24`, 'dev', 'eth0'],
    ['link', 'set', 'eth0', 'up'],
    ['link', 'set', 'lo', 'up'],
    ['route', 'add', 'default', 'via', h.host],
  ])
    await exec('ip', ['-n', h.ns, ...args]);
  const script = `require('http').createServer((q,r)=>r.end('${h.ns}-ok')).listen(${PORT},'0.0.0.0')`;
  servers.push(
    spawn('nsenter', [`--net=/run/netns/${h.ns}`, process.execPath, '-e', script], { stdio: 'ignore' }),
  );
}

describe('VM backend with the qemu driver (real boots)', () => {
  it('runs a job in a micro-VM that reaches the orchestrator but not an RFC1918 host, then leaves nothing behind', async () => {
    base = await mkdtemp(join(tmpdir(), 'kici-vmq-'));
    // Routing on in our namespace, so only the firewall stands between the VM and the LAN host.
    forwardBefore = await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8');
    await writeFile('/proc/sys/net/ipv4/ip_forward', '1');
    await attachHost(LAN);
    await attachHost(PUB);
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      config: vmConfig({
        name: 'vmq',
        bridge: BRIDGE,
        subnet: SUBNET,
        base,
        table: TABLE,
        extraHosts: ['db.internal:10.9.8.7', 'gw.internal:host-gateway'],
      }),
    });
    const orchPort = new URL(t.orch.url).port;
    const started = Date.now();
    const [id] = await submit(t, {
      vm: {
        runsOn: ['linux', 'vmq'],
        steps: [
          {
            run: 'echo "hello from $(hostname)"; grep -o "kici.net=[^ ]*" /proc/cmdline; touch /probe && echo overlay-writable; ls /run/kici.env 2>&1 | head -1',
          },
          {
            // extraHosts in the guest's /etc/hosts; the config drive was zeroed once the agent registered.
            run: 'grep internal /etc/hosts; echo "vdc-token-lines:$(tr -d "\\000" </dev/vdc | grep -c KICI_AGENT_TOKEN)"',
          },
          {
            // Node, not busybox wget: the static busybox's resolver crashes without NSS in the guest.
            run: [
              get(`http://${SUBNET}.1:${orchPort}/healthz`),
              get(`http://${PUB.peer}:${PORT}/`),
              get(`http://${LAN.peer}:${PORT}/`),
            ].join('; '),
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
    expect(lines).toContain('10.9.8.7 db.internal');
    expect(lines).toContain(`${SUBNET}.1 gw.internal`);
    expect(lines).toContain('vdc-token-lines:0');
    // Isolation: the orchestrator on the gateway answers; so does a public host (routing works)...
    expect(lines, lines.join('\n')).toContain('{"status":"ok"}');
    expect(lines).toContain('vmq-pub-ok');
    // ...but the RFC1918 host does not.
    expect(lines).not.toContain('vmq-lan-ok');
    expect(lines.filter((l) => l === 'unreachable')).toHaveLength(1);

    // The credentials file is gone once the agent has read it.
    expect(lines.some((l) => l.includes('No such file'))).toBe(true);
    const logs = await t.api<{ lines: { stream: string; line: string }[] }>('GET', `/api/v1/jobs/${id}/logs`);
    // The serial console reached the job's timeline as system lines.
    expect(logs.body.lines.some((l) => l.line.includes('kici-guest: starting agent'))).toBe(true);
    console.log(`vm job: submit -> succeeded in ${Date.now() - started} ms`);

    // Teardown: nothing of the VM is left.
    await eventually(async () => (await qemuPidsUnder(base!)).length === 0, 20_000, 'qemu gone');
    await eventually(async () => (await tapsOn(BRIDGE)).length === 0, 10_000, 'taps gone');
    // The VM's firewall rules went with it.
    const ruleset = (await exec('nft', ['list', 'table', 'inet', TABLE])).stdout;
    expect(ruleset).not.toContain(`${SUBNET}.2`);
    // The lease is released last, after the TAP and the rules: wait for it rather than race it.
    await eventually(
      async () => (await t!.orch.store.db.selectFrom('ip_allocations').selectAll().execute()).length === 0,
      10_000,
      'the IP lease released',
    );
    await expect(access(join(base, 'firecracker', job.agentId!))).rejects.toThrow();
  });
});

describe('VM disk guard before a spawn', () => {
  it('a spawn refused for disk space says so on the waiting job, and no VM is started', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-vmd-'));
    try {
      const statfs = async () => ({ bavail: 10, bsize: 4096 }); // 40 KiB free, whatever is reaped
      t2 = await startTestOrchestrator({
        host: '0.0.0.0',
        config: vmConfig({ name: 'vmd', bridge: 'vmd-br0', subnet: '10.231.9', base: dir }),
        backendDeps: { vmStatfs: statfs },
      });
      const [id] = await submit(t2, { d: { runsOn: ['linux', 'vmd'], steps: [{ run: 'true' }] } });
      const until = Date.now() + 30_000;
      let job = await t2.waitForJob(id!, ['queued', 'no-backend', 'failed'], 5_000);
      while (!`${job.lastProvisioningError ?? ''}${job.waiting ?? ''}`.includes('not enough disk space')) {
        if (Date.now() > until) throw new Error(`job shows no disk reason: ${JSON.stringify(job)}`);
        await new Promise((r) => setTimeout(r, 200));
        job = (await t2.api<JobBody>('GET', `/api/v1/jobs/${id}`)).body;
      }
      expect(`${job.lastProvisioningError ?? ''} ${job.waiting ?? ''}`).toMatch(
        /not enough disk space for a VM under .*kici-vmd-.*: 40960 bytes free/,
      );
      expect(await qemuPidsUnder(dir)).toEqual([]);
    } finally {
      await t2?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

async function eventually(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
