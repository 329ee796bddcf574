/**
 * An orchestrator that is not root, on a host with a systemd user manager, starts each bare-metal
 * agent under `systemd-run --user --scope` with its limits as properties, and teardown reaches the
 * whole scope by its unit name.
 *
 * `systemd-run` and `systemctl` here are stand-ins, and only because this host cannot run the real
 * ones: PID 1 is not systemd, so no user manager exists to create a scope. The stand-in checks its
 * arguments against systemd-run(1)'s contract (`--user --scope`, options before `--`, each `-p`
 * followed by NAME=VALUE with the values systemd.resource-control(5) takes: bytes, a percentage,
 * a task count) and then execs the command in its own process, as `--scope` does. This host's
 * cgroup tree is v1, where no user manager can hold limits, so the probe reads a small stand-in v2
 * tree (the root's and the user manager's `cgroup.controllers`). Everything else (the chooser's
 * probe, the launch, the process group, the teardown) is the real code.
 */
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../../src/config/index.js';
import { BareMetalScalerBackend } from '../../../../src/scaler/backends/bare-metal/backend.js';
import {
  chooseAgentLimits,
  hostLimitsProbes,
} from '../../../../src/scaler/backends/bare-metal/choose-limits.js';
import { groupAlive } from '../../../../src/scaler/backends/bare-metal/process-group.js';
import { spawnContext } from '../../../helpers/spawn-context.js';

const FAKE_SYSTEMD_RUN = (log: string) => `#!/bin/sh
# Stand-in for systemd-run (see the test's header): check the contract, record, exec.
fail() { echo "systemd-run (test stand-in): $*" >&2; exit 64; }
digits() { case "$1" in ''|*[!0-9]*) fail "$2: not a whole number: $1";; esac; }
prop() {
  case "$1" in
    MemoryMax=*|MemorySwapMax=*|TasksMax=*) digits "\${1#*=}" "\${1%%=*}";;
    CPUQuota=*%) v="\${1#CPUQuota=}"; digits "\${v%\\%}" CPUQuota;;
    *) fail "unknown or malformed property: $1";;
  esac
}
user=0; scope=0; seen=""
while [ $# -gt 0 ]; do
  case "$1" in
    --user) user=1;;
    --scope) scope=1;;
    --quiet|-q|--collect|-G) ;;
    --unit=*) u="\${1#--unit=}"; case "$u" in ''|*[!A-Za-z0-9:_.-]*) fail "bad unit name: $u";; esac;;
    --slice=*) ;;
    -p|--property) [ $# -ge 2 ] || fail "-p without a value"; prop "$2"; seen="$seen -p $2"; shift;;
    --property=*) prop "\${1#--property=}";;
    --) shift; break;;
    *) fail "unexpected argument before --: $1";;
  esac
  shift
done
[ "$user" = 1 ] && [ "$scope" = 1 ] || fail "--user --scope are required"
[ $# -gt 0 ] || fail "no command after --"
[ -n "$XDG_RUNTIME_DIR" ] || fail "XDG_RUNTIME_DIR not set: the user manager cannot be found"
printf 'pid=%s props=%s cmd=%s\\n' "$$" "$seen" "$*" >> ${JSON.stringify(log)}
exec "$@"
`;

const FAKE_SYSTEMCTL = (log: string) => `#!/bin/sh
# Stand-in for systemctl --user (see the test's header): record; the scope is gone once its
# processes are (--collect), which is what systemctl says about a unit that is not loaded.
echo "$*" >> ${JSON.stringify(log)}
[ "$1" = "--user" ] || { echo "expected --user" >&2; exit 64; }
echo "Failed to $2 unit: Unit \${4:-$3} not loaded." >&2
exit 5
`;

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

/** The stand-in tools, a runtime dir with the manager's socket, and a v2 tree delegating `delegated`. */
async function userManagerHost(delegated: string | undefined) {
  dir = await mkdtemp(join(tmpdir(), 'kici-user-scope-'));
  const bin = join(dir, 'bin');
  const runtimeDir = join(dir, 'run');
  await mkdir(bin);
  await mkdir(join(runtimeDir, 'systemd'), { recursive: true });
  // The user manager's private socket: the probe looks for it before the dry run.
  await writeFile(join(runtimeDir, 'systemd/private'), '');
  const runLog = join(dir, 'systemd-run.log');
  const ctlLog = join(dir, 'systemctl.log');
  await writeFile(join(bin, 'systemd-run'), FAKE_SYSTEMD_RUN(runLog), { mode: 0o755 });
  await writeFile(join(bin, 'systemctl'), FAKE_SYSTEMCTL(ctlLog), { mode: 0o755 });
  const cgroupRoot = join(dir, 'cgroup');
  const uid = process.getuid?.() ?? 0;
  const manager = join(cgroupRoot, `user.slice/user-${uid}.slice/user@${uid}.service`);
  await mkdir(manager, { recursive: true });
  await writeFile(join(cgroupRoot, 'cgroup.controllers'), 'cpuset cpu io memory hugetlb pids rdma misc\n');
  if (delegated !== undefined) await writeFile(join(manager, 'cgroup.controllers'), `${delegated}\n`);
  const hostEnv = { PATH: `${bin}:/usr/bin:/bin`, XDG_RUNTIME_DIR: runtimeDir };
  // Not root (injected: this test runs as root), so the user manager is the way.
  const probes = { ...hostLimitsProbes(hostEnv, cgroupRoot), isRoot: () => false };
  return { dir, hostEnv, runLog, ctlLog, probes, cgroupRoot };
}

describe('bare-metal limits through a systemd user scope (no root)', () => {
  it('starts the agent as the scope main process with its limits, hides the bus from it, and stops the scope on destroy', async () => {
    const { dir, hostEnv, runLog, ctlLog, probes } = await userManagerHost('cpu memory pids');
    const agent = join(dir, 'agent.sh');
    await writeFile(
      agent,
      '#!/bin/sh\necho "agent pid=$$ pgid=$(ps -o pgid= -p $$ | tr -d " ") xdg=${XDG_RUNTIME_DIR:-unset}"\nexec sleep 600\n',
    );
    await chmod(agent, 0o755);

    const limits = await chooseAgentLimits(true, probes);
    expect(limits.strategy).toBe('systemd-user-scope');
    // The dry run went through the same contract check.
    expect(await readFile(runLog, 'utf8')).toMatch(/props= -p TasksMax=16 cmd=true\n$/);

    const warnings: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (s: string) => void warnings.push(JSON.parse(s).msg) });
    const entry = scalerFileSchema.parse({
      version: 1,
      scalers: [
        {
          name: 'bm',
          type: 'bare-metal',
          maxAgents: 1,
          enforceCgroups: true,
          labelSets: [{ labels: ['linux'], binaryPath: agent, trust: 'host' }],
        },
      ],
    }).scalers[0]!;
    const backend = new BareMetalScalerBackend({
      entry,
      logger,
      baseDir: '/',
      hostEnv,
      hostFacts: { root: false, caps: new Set(), bwrap: false, setpriv: true, userNamespaces: false },
      limits,
      stopGraceMs: 2_000,
    });
    expect(backend.limitsEnforcement()).toMatchObject({
      strategy: 'systemd-user-scope',
      enforced: true,
      fix: null,
    });
    expect(warnings.filter((w) => /advisory/.test(w))).toEqual([]);

    let said: (line: string) => void = () => {};
    const firstLine = new Promise<string>((r) => (said = r));
    const failures: string[] = [];
    const agentId = 'scaler-bare-metal-scope001';
    const started = await backend.spawn(
      spawnContext(agentId, ['linux'], {
        limits: { cpus: 0.5, memBytes: 96 * 1024 * 1024 },
        onEvent: (type, detail) => {
          if (type === 'agent.output') said(detail);
          if (type === 'scaler.failed') failures.push(detail);
        },
      }),
    );
    const line = await firstLine;
    expect(failures).toEqual([]);
    const pid = Number(started.backendRef);
    // The scope's main process is the agent: systemd-run, env and the agent are one pid, its group.
    expect(line).toContain(`agent pid=${pid} pgid=${pid} xdg=unset`);
    const launched = (await readFile(runLog, 'utf8')).trim().split('\n').at(-1)!;
    expect(launched).toBe(
      `pid=${pid} props= -p MemoryMax=100663296 -p MemorySwapMax=0 -p CPUQuota=50% -p TasksMax=4096 cmd=env -u XDG_RUNTIME_DIR -- ${agent}`,
    );
    expect(groupAlive(pid)).toBe(true);

    await backend.destroy(agentId, { reason: 'job-complete' });
    expect(groupAlive(pid)).toBe(false);
    // Then the scope itself, by name: whatever left the group but stayed in the scope.
    expect((await readFile(ctlLog, 'utf8')).trim().split('\n')).toEqual([
      `--user kill --signal=SIGKILL kici-agent-${agentId}.scope`,
      `--user stop kici-agent-${agentId}.scope`,
    ]);
    // A scope already collected is the normal end, not a failure to report.
    expect(warnings.filter((w) => /could not remove/.test(w))).toEqual([]);
  });

  it('a manager missing some limit controllers: enforced, but the missing limits are said once as advisory', async () => {
    const { probes } = await userManagerHost('memory');
    const limits = await chooseAgentLimits(true, probes);
    expect(limits).toMatchObject({ strategy: 'systemd-user-scope', enforced: true });
    expect(limits.advisory?.problem).toBe(
      "the systemd user manager has no cpu, pids controller delegated to it, so agents' CPU and task limits are advisory",
    );
    expect(limits.advisory?.fix).toMatch(/Delegate=memory cpu pids/);
  });

  it('a manager with none of them, or a tree that is not v2: no scope, the limits are advisory', async () => {
    const none = await userManagerHost('');
    const a = await chooseAgentLimits(true, none.probes);
    expect(a.strategy).toBe('advisory');
    expect(a.advisory?.problem).toMatch(/has none of the memory, cpu and pids controllers delegated/);
    await rm(join(none.cgroupRoot, 'cgroup.controllers'));
    const v1 = await chooseAgentLimits(true, none.probes);
    expect(v1.strategy).toBe('advisory');
    expect(v1.advisory?.problem).toMatch(/is not a unified cgroup v2 tree/);
  });
});
