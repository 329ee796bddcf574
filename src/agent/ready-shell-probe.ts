import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { ReadyShell, STEP_SHELL } from './ready-shell.js';

/** What a step sees of its start: its environment as the kernel holds it (sorted) and its directory. */
const PROBE =
  'tr "\\0" "\\n" < /proc/$$/environ | sort; echo "--"; pwd; echo "PWD=$PWD OLDPWD=${OLDPWD-unset} 0=$0"';

interface Seen {
  code: number | null;
  out: string;
}

function collect(child: ReturnType<typeof spawn>): Promise<Seen> {
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += String(d)));
  child.stderr?.on('data', (d: Buffer) => (out += String(d)));
  return new Promise((ok) => {
    child.once('error', () => ok({ code: null, out }));
    child.once('close', (code) => ok({ code, out }));
  });
}

async function sameStart(shell: string, env: Record<string, string>): Promise<string | undefined> {
  const cwd = tmpdir();
  const direct = collect(spawn(shell, ['-c', PROBE], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] }));
  const ready = ReadyShell.start(shell);
  if (!ready) return 'it could not be started';
  const handed = collect(ready.child);
  if (!ready.handOver(PROBE, cwd, env)) {
    ready.discard();
    return 'the probe could not be handed over';
  }
  const [a, b] = await Promise.all([direct, handed]);
  // Without /proc there is nothing to compare: the variables must be seen, not assumed.
  if (a.code !== 0 || !a.out.includes('KICI_PROBE=')) return 'this host does not show a process environment';
  if (a.code !== b.code || a.out !== b.out) return `${shell} passes on more than the step's own variables`;
  return undefined;
}

/**
 * Whether a step handed to a waiting shell (ready-shell.ts) starts exactly as a directly spawned
 * one on this host: the same variables and directory, with and without PWD and OLDPWD among the
 * step's variables. Some shells add variables of their own to what they exec (bash adds `_`, and
 * SHLVL); steps are then always spawned directly. Undefined when they match, else why not.
 */
export async function readyShellMismatch(shell = STEP_SHELL): Promise<string | undefined> {
  const base = { PATH: process.env.PATH ?? '/usr/bin:/bin', KICI_PROBE: "it's\nhere" };
  return (await sameStart(shell, base)) ?? (await sameStart(shell, { ...base, PWD: '/', OLDPWD: tmpdir() }));
}
