/**
 * Takeover in a container agent: a step looks for its agent's token everywhere a step can look (its
 * environment, every process's initial environment under /proc, the handoff file, the agent's own
 * memory through /proc/<agent>/mem) and the engine's own inspect of the container is checked too.
 * The step is root like its agent; the agent is non-dumpable and the step lacks CAP_SYS_PTRACE, so
 * it finds nothing, and its attempt to register as that agent is refused; the job queued behind it
 * runs on a real agent and ends with its true result (exit 3, failed).
 *
 * KICI_TEST_TAKEOVER_UNSEALED=1 starts the agents with KICI_AGENT_SEAL=off, to show this test fails
 * when the agent is not sealed (the memory scan then finds the token and the session proof).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { outputLines, submit, waitForLine } from '../../helpers/jobs.js';
import {
  AGENT_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';
import { MEMORY_SCAN } from '../../helpers/takeover.js';

const NAME = `takeover-${ENGINE}`;
let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

const NODE_CMD = '/opt/kici/lib/ld-linux-x86-64.so.2 --library-path /opt/kici/lib /opt/kici/bin/node';
const AGENT_CMD = `${NODE_CMD} /opt/kici/app/dist/cli/agent.js`;
const UNSEALED = process.env.KICI_TEST_TAKEOVER_UNSEALED === '1';

const attack = [
  `echo "env-token=$(env | grep -c '^KICI_AGENT_TOKEN=')"`,
  `echo "proc-token=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c '^KICI_AGENT_TOKEN=')"`,
  'if [ -e /tmp/.kici-handoff/agent-token ]; then echo file=present; else echo file=absent; fi',
  // The agent's own /proc entries: reached (its command line names it), but its environment and
  // memory are refused.
  `echo "agent-cmdline=$(tr '\\0' ' ' </proc/$PPID/cmdline | grep -c 'cli/agent.js')"`,
  'if cat /proc/$PPID/environ >/dev/null 2>&1; then echo agent-environ=read; else echo agent-environ=refused; fi',
  `set -- $(AGENT_PID=$PPID ${NODE_CMD} -e "$MEMORY_SCAN_SRC" 2>/tmp/scan.err); memtoken=$1`,
  // no: the scan ran and found none; yes: it found one; error: the scan did not finish.
  'seen() { case "$1" in none) echo no ;; kici_* | kses_*) echo yes ;; *) echo error ;; esac; }',
  'echo "mem-token=$(seen "$1")"',
  'echo "mem-proof=$(seen "$2")"',
  'echo "mem-error=$(cat /tmp/scan.err)"',
  `found=$( (cat /tmp/.kici-handoff/agent-token; cat /proc/[0-9]*/environ | tr '\\0' '\\n' | sed -n 's/^KICI_AGENT_TOKEN=//p'; [ "$memtoken" != none ] && echo "$memtoken") 2>/dev/null | head -1)`,
  'echo "found=${#found}"',
  'echo probed',
  // The test looks at the container from the engine's side meanwhile, then lets the step go on.
  'n=0; while [ ! -e /tmp/.kici-go ] && [ $n -lt 900 ]; do sleep 0.1; n=$((n+1)); done',
  // Register as this very agent with whatever was found (a real agent process, its own id).
  `if [ -z "$found" ]; then KICI_AGENT_TOKEN="x$found" ${AGENT_CMD} >/tmp/reg.log 2>&1 & p=$!; else echo register=found-a-token; fi`,
  'n=0; while kill -0 $p 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done',
  'if kill -0 $p 2>/dev/null; then echo register=still-trying; kill $p; else wait $p; echo "register-exit=$?"; fi',
  'cat /tmp/reg.log | tail -3',
].join('\n');

describe(`container agent token on ${ENGINE}`, () => {
  it('no step can read it or register as its agent; the next job runs on a real agent with its true result', async () => {
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      isolation: new RecordingIsolation(),
      config: {
        version: 1,
        scalers: [
          containerScaler(NAME, {}, [
            {
              labels: [NAME],
              image: AGENT_IMAGE,
              imagePullPolicy: 'Never',
              ...(UNSEALED && { env: { KICI_AGENT_SEAL: 'off' } }),
            },
          ]),
        ],
      },
    });
    const [attacker] = await submit(t, {
      attacker: { runsOn: [NAME], env: { MEMORY_SCAN_SRC: MEMORY_SCAN }, steps: [{ run: attack }] },
    });
    await waitForLine(t, attacker!, /^probed$/, 120_000);
    // Queued behind the attack while it runs.
    const [victim] = await submit(t, {
      victim: { runsOn: [NAME], env: { DEPLOY_KEY: 'k' }, steps: [{ run: 'echo victim-ran; exit 3' }] },
    });
    const [c] = await scalerContainers(NAME);
    const info = await docker.getContainer(c!.Id).inspect();
    const env = info.Config.Env ?? [];
    expect(env.filter((e) => e.startsWith('KICI_AGENT_TOKEN='))).toEqual([]);
    expect(env).toContain('KICI_AGENT_TOKEN_FILE=/tmp/.kici-handoff/agent-token');
    const exec = await docker.getContainer(c!.Id).exec({ Cmd: ['touch', '/tmp/.kici-go'] });
    await exec.start({ Detach: true });

    const a = await t.waitForJob(attacker!, undefined, 120_000);
    const lines = await outputLines(t, attacker!);
    const text = lines.join('\n');
    const get = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
    expect(a.state, text).toBe('succeeded');
    expect(get('env-token'), text).toBe('0');
    expect(get('proc-token'), text).toBe('0');
    expect(get('file'), text).toBe('absent');
    expect(get('agent-cmdline'), text).toBe('1');
    expect(get('agent-environ'), text).toBe('refused');
    expect(get('mem-error'), text).toMatch(/EACCES|EPERM/);
    expect(get('mem-token'), text).toBe('no');
    expect(get('mem-proof'), text).toBe('no');
    expect(get('found'), text).toBe('0');
    // The guessed token is refused: the agent exits 2, naming the refusal.
    expect(get('register-exit'), text).toBe('2');

    const v = await t.waitForJob(victim!, undefined, 120_000);
    expect(v.state).toBe('failed');
    expect(v.exitCode).toBe(3);
    expect(await outputLines(t, victim!)).toContain('victim-ran');
    expect(v.agentId).not.toBe(a.agentId);
  });
});
