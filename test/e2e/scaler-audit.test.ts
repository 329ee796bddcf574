/**
 * `kici-admin scaler audit` against a real orchestrator with a bare-metal scaler and real agent
 * processes: drift both ways (an agent process no record accounts for; a record and a token with
 * nothing behind them), an agent killed behind the orchestrator's back, and `--fix`.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { jobGate, submit } from '../helpers/jobs.js';
import { listAgentProcesses } from '../../src/scaler/backends/bare-metal/orphans.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  NODE,
  alive,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
const pids: number[] = [];
afterEach(async () => {
  for (const pid of pids.splice(0)) if (alive(pid)) process.kill(pid, 'SIGKILL');
  await t?.stop();
  t = undefined;
});

interface Drift {
  kind: string;
  resource: string;
  scaler: string | null;
  agentId: string | null;
  ref: string;
}
interface Report {
  drift: Drift[];
  unchecked: unknown[];
  fixed?: { drift: Drift; ok: boolean }[];
  remaining?: Drift[];
}

async function audit(...args: string[]): Promise<{ code: number | null; report: Report; stderr: string }> {
  const r = await runNode([ADMIN_BIN, 'scaler', 'audit', '--json', ...args], {
    KICI_SERVER_URL: t!.orch.url,
    KICI_ADMIN_TOKEN: t!.orch.adminToken,
  }).exited;
  return { code: r.code, report: JSON.parse(r.stdout || '{}') as Report, stderr: r.stderr };
}

/** A real agent of `scaler` whose launcher exits at once (re-parented to init), no record behind it. */
async function strayAgent(agentId: string, scaler: string): Promise<number> {
  const sh = spawn('sh', ['-c', 'setsid "$0" "$1" </dev/null >/dev/null 2>&1 & echo $!', NODE, AGENT_BIN], {
    env: {
      PATH: process.env.PATH,
      KICI_AGENT_ID: agentId,
      KICI_AGENT_TOKEN: 'not-a-token',
      KICI_SCALER_MANAGED: '1',
      KICI_LABELS: `linux,kici:scaler:${scaler},kici:agent:${agentId}`,
      // Nothing listens there: the agent keeps retrying, like one whose orchestrator died.
      KICI_ORCHESTRATOR_URL: 'ws://127.0.0.1:1',
    },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let out = '';
  sh.stdout.on('data', (d) => (out += String(d)));
  await new Promise((r) => sh.on('close', r));
  const pid = Number(out.trim());
  pids.push(pid);
  await eventually(
    async () => (await listAgentProcesses(scaler)).some((p) => p.pid === pid && p.ppid === 1),
    10_000,
    `stray agent ${agentId} re-parented`,
  );
  return pid;
}

describe('kici-admin scaler audit (bare-metal)', () => {
  it('reports drift both ways, exits 1 on it, and --fix reconciles to 0', async () => {
    const tag = randomBytes(4).toString('hex');
    const scaler = `audit${tag}`;
    t = await startTestOrchestrator({
      config: bareMetalConfig({ name: scaler }, [{ labels: ['linux'], binaryPath: AGENT_BIN }]),
      scalerAuditIntervalMs: 0,
    });
    const gate = await jobGate();
    try {
      // A live agent with its record and token: no drift.
      const [jobId] = await submit(t, { held: { runsOn: ['linux'], steps: [{ run: gate.wait }] } });
      const job = await t.waitForJob(jobId!, ['running']);
      const clean = await audit();
      expect(clean.code, clean.stderr).toBe(0);
      expect(clean.report).toEqual({ drift: [], unchecked: [] });

      // Compute no record accounts for.
      const strayId = `scaler-bare-metal-${tag}-stray`;
      const strayPid = await strayAgent(strayId, scaler);
      // A record (old enough to have compute) with nothing behind it, and a token no agent holds.
      const ghostId = `scaler-bare-metal-${tag}-ghost`;
      const tokenId = `scaler-bare-metal-${tag}-token`;
      const now = Date.now();
      await t.orch.store.spawns.insertSpawn(
        {
          agentId: ghostId,
          scalerName: scaler,
          backendType: 'bare-metal',
          peerAdoptable: false,
          labelSet: ['linux'],
          runId: null,
          boundJobId: null,
          ownerInstanceId: t.orch.instanceId,
          mandatoryLabels: [],
          spawnedAt: new Date(now - 120_000),
        },
        { cpus: 0, memBytes: 0 },
      );
      await t.orch.store.tokens.mint({
        agentId: tokenId,
        labels: ['linux'],
        kind: 'ephemeral',
        ttlMs: 600_000,
        now: new Date(now),
      });
      const drifted = await audit();
      expect(drifted.code, drifted.stderr).toBe(1);
      expect(drifted.report.drift).toEqual([
        { kind: 'missing-compute', resource: 'record', scaler, agentId: ghostId, ref: ghostId },
        { kind: 'orphan-token', resource: 'token', scaler: null, agentId: tokenId, ref: tokenId },
        { kind: 'unrecorded-compute', resource: 'process', scaler, agentId: strayId, ref: String(strayPid) },
      ]);
      const text = await runNode([ADMIN_BIN, 'scaler', 'audit'], {
        KICI_SERVER_URL: t.orch.url,
        KICI_ADMIN_TOKEN: t.orch.adminToken,
      }).exited;
      expect(text.code).toBe(1);
      expect(text.stdout).toMatch(/drift \(3\):/);
      expect(text.stdout).toMatch(
        new RegExp(`unrecorded-compute\\s+process\\s+${scaler}\\s+${strayId}\\s+${strayPid}`),
      );

      // The drift gauge follows the last audit.
      const metrics = await fetch(`${t.orch.url}/metrics`, {
        headers: { authorization: `Bearer ${t.orch.adminToken}` },
      }).then((r) => r.text());
      expect(metrics).toMatch(/kici_orch_scaler_audit_drift\{kind="unrecorded_compute"\} 1/);
      expect(metrics).toMatch(/kici_orch_scaler_audit_drift\{kind="missing_compute"\} 1/);

      // The live agent killed behind the orchestrator's back: it notices, and leaves no drift of it.
      const agentPid = (await listAgentProcesses(scaler)).find((p) => p.agentId === job.agentId)?.pid;
      expect(agentPid).toBeGreaterThan(0);
      process.kill(agentPid!, 'SIGKILL');
      const ended = await t.waitForJob(jobId!);
      expect(ended.state).toBe('failed');

      const fixed = await audit('--fix');
      expect(fixed.code, fixed.stderr).toBe(0);
      expect(fixed.report.drift.map((d) => d.agentId)).toEqual([ghostId, tokenId, strayId]);
      expect(fixed.report.fixed?.every((f) => f.ok)).toBe(true);
      expect(fixed.report.remaining).toEqual([]);
      await eventually(() => !alive(strayPid), 10_000, 'the stray agent to be gone');
      expect((await t.orch.store.spawns.listOwned(t.orch.instanceId)).map((r) => r.agent_id)).not.toContain(
        ghostId,
      );
      const again = await audit();
      expect(again.code, again.stderr).toBe(0);
      expect(again.report.drift).toEqual([]);
    } finally {
      await gate.open();
      await gate.close();
    }
  });
});
