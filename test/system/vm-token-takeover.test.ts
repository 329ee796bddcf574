import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { outputLines, submit } from '../helpers/jobs.js';
import { startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';
import { MEMORY_SCAN } from '../helpers/takeover.js';
import { deleteLink, vmConfig } from '../helpers/vm.js';

const exec = promisify(execFile);

/**
 * Takeover in a micro-VM (QEMU, real boots): a step looks for its agent's token in its
 * environment, in every process's initial environment under /proc, in the handoff file, on the
 * config drive and in the agent's own memory through /proc/<agent>/mem. The step is root like its
 * agent; the agent is non-dumpable and the guest starts it (and so its steps) without the
 * capabilities that read another process's memory. The step finds nothing, so its attempt to
 * register as that agent is refused, and the job queued behind it runs on a real agent with its
 * true result (exit 3, failed). Needs a guest built by scripts/build-vm-guest.sh from this tree (its
 * init hands the token over as a file and drops those capabilities).
 *
 * KICI_TEST_TAKEOVER_UNSEALED=1 starts the agents with KICI_AGENT_SEAL=off, to show this test fails
 * when the agent is not sealed (the memory scan then finds the token and the session proof).
 */
const BRIDGE = 'vmt-br0';
const SUBNET = '10.231.11';
const TABLE = 'vmt-t';

let t: TestOrchestrator | undefined;
let base: string | undefined;
afterAll(async () => {
  await t?.stop();
  await deleteLink(BRIDGE);
  await exec('nft', ['delete', 'table', 'inet', TABLE]).catch(() => {});
  if (base) await rm(base, { recursive: true, force: true });
});

const attack = [
  `echo "env-token=$(env | grep -c '^KICI_AGENT_TOKEN=')"`,
  `echo "proc-token=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '^KICI_AGENT_TOKEN=')"`,
  'if [ -e /tmp/.kici-agent-token ]; then echo file=present; else echo file=absent; fi',
  `echo "vdc-token=$(tr -d '\\000' </dev/vdc 2>/dev/null | grep -c KICI_AGENT_TOKEN)"`,
  // The agent's own /proc entries: reached (its command line names it), but its environment and
  // memory are refused.
  `echo "agent-cmdline=$(tr '\\0' ' ' </proc/$PPID/cmdline | grep -c 'cli/agent.js')"`,
  'if cat /proc/$PPID/environ >/dev/null 2>&1; then echo agent-environ=read; else echo agent-environ=refused; fi',
  'set -- $(AGENT_PID=$PPID node -e "$MEMORY_SCAN_SRC" 2>/tmp/scan.err); memtoken=$1',
  // no: the scan ran and found none; yes: it found one; error: the scan did not finish.
  'seen() { case "$1" in none) echo no ;; kici_* | kses_*) echo yes ;; *) echo error ;; esac; }',
  'echo "mem-token=$(seen "$1")"',
  'echo "mem-proof=$(seen "$2")"',
  'echo "mem-error=$(cat /tmp/scan.err)"',
  `found=$( (cat /tmp/.kici-agent-token; cat /proc/[0-9]*/environ | tr '\\0' '\\n' | sed -n 's/^KICI_AGENT_TOKEN=//p'; [ "$memtoken" != none ] && echo "$memtoken") 2>/dev/null | head -1)`,
  'echo "found=${#found}"',
  // Register as this very agent (its own id and URL are in the step's environment).
  'KICI_AGENT_TOKEN="x$found" node /opt/kici/dist/cli/agent.js >/tmp/reg.log 2>&1 & p=$!',
  'n=0; while kill -0 $p 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done',
  'if kill -0 $p 2>/dev/null; then echo register=still-trying; kill $p; else wait $p; echo "register-exit=$?"; fi',
].join('\n');

describe('VM agent token (qemu)', () => {
  it('no step can read it or register as its agent; the next job runs on a real agent with its true result', async () => {
    base = await mkdtemp(join(tmpdir(), 'kici-vmt-'));
    const config = vmConfig({
      name: 'vmt',
      bridge: BRIDGE,
      subnet: SUBNET,
      base,
      table: TABLE,
      maxAgents: 1,
    });
    if (process.env.KICI_TEST_TAKEOVER_UNSEALED === '1')
      (config.scalers[0]!.labelSets[0] as Record<string, unknown>).env = { KICI_AGENT_SEAL: 'off' };
    t = await startTestOrchestrator({ host: '0.0.0.0', config });
    const [attacker] = await submit(t, {
      attacker: { runsOn: ['linux', 'vmt'], env: { MEMORY_SCAN_SRC: MEMORY_SCAN }, steps: [{ run: attack }] },
    });
    await t.waitForJob(attacker!, ['running', 'succeeded', 'failed'], 240_000);
    // Queued behind the attack (one VM at a time).
    const [victim] = await submit(t, {
      victim: {
        runsOn: ['linux', 'vmt'],
        env: { DEPLOY_KEY: 'k' },
        steps: [{ run: 'echo victim-ran; exit 3' }],
      },
    });
    const a = await t.waitForJob(attacker!, undefined, 240_000);
    const lines = await outputLines(t, attacker!);
    const text = lines.join('\n');
    const get = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
    expect(a.state, text).toBe('succeeded');
    expect(get('env-token'), text).toBe('0');
    expect(get('proc-token'), text).toBe('0');
    expect(get('file'), text).toBe('absent');
    expect(get('vdc-token'), text).toBe('0');
    expect(get('agent-cmdline'), text).toBe('1');
    expect(get('agent-environ'), text).toBe('refused');
    expect(get('mem-error'), text).toMatch(/EACCES|EPERM/);
    expect(get('mem-token'), text).toBe('no');
    expect(get('mem-proof'), text).toBe('no');
    expect(get('found'), text).toBe('0');
    expect(get('register-exit'), text).toBe('2');

    const v = await t.waitForJob(victim!, undefined, 240_000);
    expect(v.state).toBe('failed');
    expect(v.exitCode).toBe(3);
    expect(await outputLines(t, victim!)).toContain('victim-ran');
    expect(v.agentId).not.toBe(a.agentId);
  });
});
