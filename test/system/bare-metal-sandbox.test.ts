import { cp, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { outputLines, submit } from '../helpers/jobs.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Sandbox (KICI_SANDBOX=true, bwrap from apt): a step cannot read the orchestrator's data dir,
 * cannot write anywhere on the host but its own work dir, sees no other agent's home, and runs in
 * its own PID namespace. The data dir lives outside /tmp here, so it is hidden explicitly and not
 * only by the private /tmp.
 */

let t: TestOrchestrator | undefined;
let dataDir: string | undefined;
const strays: string[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
  dataDir = undefined;
  for (const p of strays.splice(0)) await rm(p, { recursive: true, force: true });
});

const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

describe('bare-metal sandbox (bubblewrap)', () => {
  it('hides the data dir and other agents, allows writes only to the own work dir, gives a PID namespace', async () => {
    dataDir = await mkdtemp('/var/tmp/kici-sbx-data-');
    await cp(join(inject('templateDataDir'), 'pg'), join(dataDir, 'pg'), { recursive: true });
    t = await startTestOrchestrator({
      dataDir,
      config: bareMetalConfig({ maxAgents: 2 }, [
        { labels: ['linux'], binaryPath: AGENT_BIN, env: { KICI_SANDBOX: 'true' } },
      ]),
    });
    const tag = `${process.pid}-${Date.now()}`;
    const outside = [
      `/var/tmp/kici-sbx-escape-${tag}`,
      join(dataDir, `escape-${tag}`),
      `/tmp/kici-sbx-escape-${tag}`,
    ];
    strays.push(...outside);
    const script = [
      `cat ${dataDir}/admin-token >/dev/null 2>&1; echo "read-token=$?"`,
      `echo "data-entries=$(ls -A ${dataDir} | wc -l)"`,
      ...outside.map((p, i) => `touch ${p} 2>/dev/null; echo "write-${i}=$?"`),
      `echo own > "$KICI_WORK_DIR/own-${tag}" && echo "own-write=ok"`,
      `echo "homes=$(ls -A "$(dirname "$KICI_WORK_DIR")" | tr '\\n' ' ')"`,
      `echo "me=$(basename "$KICI_WORK_DIR")"`,
      `echo "procs=$(ls /proc | grep -c '^[0-9]')"`,
      `echo "pid1=$(cat /proc/1/comm)"`,
      // A second agent is up at the same time (maxAgents 2): its home must stay out of sight.
      'sleep 2',
    ].join('\n');
    const ids = await submit(t, {
      a: { runsOn: ['linux'], steps: [{ run: script }] },
      b: { runsOn: ['linux'], steps: [{ run: script }] },
    });
    const jobs = await Promise.all(ids.map((id) => t!.waitForJob(id, undefined, 60_000)));
    expect(jobs.map((j) => j.state)).toEqual(['succeeded', 'succeeded']);
    const token = await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8');
    for (const id of ids) {
      const lines = await outputLines(t, id);
      const get = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
      expect(get('read-token'), lines.join('\n')).not.toBe('0');
      expect(lines.join('\n')).not.toContain(token);
      expect(get('data-entries')).toBe('0');
      expect(get('own-write')).toBe('ok');
      // Only its own home is visible next to it.
      expect(get('homes')?.trim()).toBe(get('me'));
      // Its own PID namespace: bwrap's init is pid 1, and only a handful of processes are visible.
      expect(Number(get('procs'))).toBeLessThan(15);
      expect(get('pid1')).toBe('bwrap');
    }
    // Nothing the steps "wrote" outside their work dirs reached the host.
    for (const p of outside) expect(await exists(p), p).toBe(false);
    expect((await readdir(dataDir)).filter((n) => n.startsWith('escape'))).toEqual([]);
    // The homes are removed with their agents.
    await eventually(() => scalerIdle(t!.orch.scaler!), 15_000, 'agents torn down');
    for (const j of jobs) {
      const home = `/tmp/kici-agent-homes/${j.agentId}`;
      await eventually(async () => !(await exists(home)), 10_000, `${home} removed`);
    }
  });
});
