/**
 * Real nftables isolation of real agent containers (Docker or Podman, per KICI_TEST_ENGINE; the test
 * runs inside the engine's network namespace). Hosts this file attaches to that namespace: an
 * RFC1918 one and a public-ish one (TEST-NET-3). A job's own step probes them from inside its agent
 * container; the job finishing at all shows the agent reached the orchestrator.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NftAgentIsolation } from '../../../src/net/nft-isolation.js';
import { createNftRunner } from '../../../src/net/nft-runner.js';
import { outputLines, submit } from '../../helpers/jobs.js';
import { createServer } from 'node:net';
import {
  AGENT_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { attachedHost, ip } from '../../helpers/netns-lab.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

const tag = randomBytes(3).toString('hex');
const NAME = `iso-${ENGINE}-${tag}`;
const PORT = 18090;
const octet = 200 + randomInt(50);
const LAN = `10.${octet}.0.2`;
const LAN2 = `10.${octet}.0.3`;
const quad = 4 * randomInt(60);
const PUB = `203.0.113.${quad + 2}`;
const teardown: (() => Promise<void>)[] = [];
const iso = new NftAgentIsolation({ runner: createNftRunner(), table: `h2ci_${tag}` });
let t: TestOrchestrator | undefined;

beforeAll(async () => {
  teardown.push(
    await attachedHost(`h2ci-${tag}-lan`, `h2l${tag}`, `10.${octet}.0.1/24`, `${LAN}/24`, [PORT]),
  );
  await ip('-n', `h2ci-${tag}-lan`, 'addr', 'add', `${LAN2}/24`, 'dev', 'eth0');
  teardown.push(
    await attachedHost(`h2ci-${tag}-pub`, `h2p${tag}`, `203.0.113.${quad + 1}/30`, `${PUB}/30`, [PORT]),
  );
});

afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

afterAll(async () => {
  for (const d of teardown.reverse()) await d();
  await iso.dropTable();
});

/** A step that reports (with the image's own node, started through its bundled loader), for each address, whether a TCP connection to it opens within 1.5 s. */
const PROBE = `L=$(echo /opt/kici/lib/ld-linux*); $L --library-path /opt/kici/lib /opt/kici/bin/node -e 'const net=require("net");for(const h of process.argv.slice(1)){const s=net.connect(${PORT},h);const say=(r)=>{console.log("probe "+h+" "+r);s.destroy()};s.setTimeout(1500,()=>say("blocked"));s.on("connect",()=>say("reachable"));s.on("error",(e)=>say("blocked "+e.code))}' ${LAN} ${LAN2} ${PUB}`;

async function probeFrom(labelSet: Record<string, unknown>, networkIsolation = true) {
  t = await startTestOrchestrator({
    host: '0.0.0.0',
    isolation: iso,
    config: {
      version: 1,
      scalers: [
        containerScaler(NAME, { networkIsolation }, [
          { ...(containerScaler(NAME).labelSets[0] as object), ...labelSet },
        ]),
      ],
    },
  });
  const [jobId] = await submit(t, { probe: { runsOn: [NAME], steps: [{ run: `${PROBE}; sleep 1` }] } });
  // While the job runs, its container's address has rules; the container's IP is read from the engine.
  let ruledWhileRunning: string[] = [];
  let containerIp: string | undefined;
  const job = await (async () => {
    const done = t!.waitForJob(jobId!, undefined, 60_000);
    if (networkIsolation) {
      containerIp = await eventually(
        async () => {
          const [c] = (await scalerContainers(NAME)).filter((x) => x.State === 'running');
          return c?.NetworkSettings?.Networks?.['kici-agent-net']?.IPAddress || undefined;
        },
        60_000,
        'the agent container address',
      );
      // The backend installs the rules right after the engine reports the address (before the agent may start).
      ruledWhileRunning = await eventually(
        async () => {
          const ruled = await iso.listRuled();
          return ruled.includes(containerIp!) ? ruled : undefined;
        },
        10_000,
        'rules for the agent address',
      );
    }
    return done;
  })();
  const lines = await outputLines(t, jobId!);
  const result = Object.fromEntries(
    lines.filter((l) => l.startsWith('probe ')).map((l) => [l.split(' ')[1]!, l.split(' ')[2]!]),
  );
  await eventually(
    async () => (await scalerContainers(NAME)).length === 0,
    30_000,
    'agent container removed',
  );
  return { job, lines, result, containerIp, ruledWhileRunning };
}

describe(`container network isolation with real nft on ${ENGINE}`, () => {
  it('control: without isolation the agent container reaches every host', async () => {
    const r = await probeFrom({}, false);
    expect(r.job.state, r.lines.join('\n')).toBe('succeeded');
    expect(r.result, r.lines.join('\n')).toEqual({
      [LAN]: 'reachable',
      [LAN2]: 'reachable',
      [PUB]: 'reachable',
    });
  });

  it('an isolated agent reaches the orchestrator and public hosts, not the RFC1918 host; no rule is left after destroy', async () => {
    const r = await probeFrom({});
    expect(r.job.state, r.lines.join('\n')).toBe('succeeded');
    expect(r.result, r.lines.join('\n')).toEqual({ [LAN]: 'blocked', [LAN2]: 'blocked', [PUB]: 'reachable' });
    expect(r.ruledWhileRunning).toContain(r.containerIp);
    await eventually(async () => !(await iso.listRuled()).includes(r.containerIp!), 10_000, 'rules removed');
  });

  it('with denyAll the agent reaches only the allowlist (and the orchestrator)', async () => {
    const r = await probeFrom({ networkPolicy: { denyAll: true, allowlist: [`${LAN}/32`] } });
    expect(r.job.state, r.lines.join('\n')).toBe('succeeded');
    expect(r.result, r.lines.join('\n')).toEqual({ [LAN]: 'reachable', [LAN2]: 'blocked', [PUB]: 'blocked' });
    await eventually(async () => !(await iso.listRuled()).includes(r.containerIp!), 10_000, 'rules removed');
  });

  it('a container on the agent network with no rules of its own is refused everywhere, the orchestrator port too', async () => {
    await iso.prepare();
    // Stands in for the orchestrator: a listener on the host, reached at the network's gateway.
    const host = createServer((sock) => sock.destroy());
    await new Promise<void>((r) => host.listen(0, '0.0.0.0', () => r()));
    const hostPort = (host.address() as { port: number }).port;
    const targets = [`172.30.0.1:${hostPort}`, `${LAN}:${PORT}`, `${PUB}:${PORT}`];
    const probe = `L=$(echo /opt/kici/lib/ld-linux*); $L --library-path /opt/kici/lib /opt/kici/bin/node -e 'const net=require("net");for(const t of process.argv.slice(1)){const [h,p]=t.split(":");const s=net.connect(Number(p),h);const say=(r)=>{console.log("probe "+t+" "+r);s.destroy()};s.setTimeout(1500,()=>say("timeout"));s.on("connect",()=>say("reachable"));s.on("error",(e)=>say(e.code))}' ${targets.join(' ')}`;
    const c = await docker.createContainer({
      Image: AGENT_IMAGE,
      Entrypoint: ['/bin/sh', '-c', probe],
      Labels: { 'kici-scaler-name': NAME },
      HostConfig: { NetworkMode: 'kici-agent-net' },
    });
    try {
      await c.start();
      await c.wait();
      const out = (await c.logs({ stdout: true, stderr: true })).toString();
      const seen = Object.fromEntries(
        [...out.matchAll(/probe (\S+) (\S+)/g)].map((m) => [m[1]!, m[2]!] as const),
      );
      // A TCP reset from the table: refused at once, so an agent retries instead of waiting.
      expect(seen, out).toEqual(Object.fromEntries(targets.map((t) => [t, 'ECONNREFUSED'])));
    } finally {
      await c.remove({ force: true });
      await new Promise<void>((r) => host.close(() => r()));
    }
  });
});
