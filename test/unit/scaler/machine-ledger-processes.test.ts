import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { poolFilePath, type LedgerReservation } from '../../../src/scaler/ledger/ledger-file.js';
import { MachineLedger } from '../../../src/scaler/ledger/machine-ledger.js';

/**
 * Real cross-process tests: each child is a separate Node process running the current src/ via
 * type stripping (fixtures/ts-resolve-hook.mjs maps `./x.js` imports to `./x.ts`), so no build
 * is needed and a stale dist/ cannot hide a regression.
 */
const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, '../../..');
const repoNode = join(repoRoot, 'node_modules', '.bin', 'node');
const NODE = existsSync(repoNode) ? repoNode : process.execPath;
const HOOK = pathToFileURL(join(here, 'fixtures', 'ts-resolve-hook.mjs')).href;
const CHILD = join(here, 'fixtures', 'ledger-child.ts');

interface Child {
  proc: ChildProcessWithoutNullStreams;
  nextLine(): Promise<string>;
  exited: Promise<void>;
}

function startChild(args: string[]): Child {
  const proc = spawn(
    NODE,
    ['--import', HOOK, '--experimental-transform-types', '--no-warnings', CHILD, ...args],
    {
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  let stderr = '';
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((res) => proc.once('exit', () => res()));
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  return {
    proc,
    exited,
    async nextLine() {
      const next = await Promise.race([lines.next(), exited.then(() => ({ done: true, value: undefined }))]);
      if (next.done || next.value === undefined) {
        throw new Error(
          `ledger child (${NODE}) ended early; it needs Node >= 22.15 with type stripping:\n${stderr}`,
        );
      }
      return next.value;
    },
  };
}

describe('MachineLedger across processes', () => {
  let dir: string;
  let children: Child[];
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-ledger-proc-'));
    children = [];
  });
  afterEach(async () => {
    for (const c of children)
      if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
    await Promise.all(children.map((c) => c.exited));
    await rm(dir, { recursive: true, force: true });
  });

  const launch = (instanceId: string, maxCpu: number, cpus: number, attempts: number): Child => {
    const c = startChild([dir, instanceId, 'pool', String(maxCpu), String(cpus), String(attempts)]);
    children.push(c);
    return c;
  };
  const rows = async (): Promise<LedgerReservation[]> =>
    (JSON.parse(await readFile(poolFilePath(dir, 'pool'), 'utf8')) as { reservations: LedgerReservation[] })
      .reservations;

  it('N processes racing tryReserve never exceed the cap and grant exactly floor(cap/req)', async () => {
    const cap = 9;
    const req = 2;
    const procs = Array.from({ length: 4 }, (_, i) => launch(`orch-${i}`, cap, req, 4));
    for (const p of procs) expect(await p.nextLine()).toBe('ready');
    for (const p of procs) p.proc.stdin.write('go\n'); // all start together
    const results = await Promise.all(
      procs.map(async (p) => JSON.parse(await p.nextLine()) as Record<string, number>),
    );
    for (const r of results) expect(r).not.toHaveProperty('error');
    const granted = results.reduce((n, r) => n + (r.granted ?? 0), 0);
    expect(granted).toBe(Math.floor(cap / req));
    const held = await rows();
    expect(held).toHaveLength(granted);
    expect(held.reduce((s, r) => s + r.cpus, 0)).toBeLessThanOrEqual(cap);
    for (const p of procs) p.proc.stdin.end();
  });

  it('rows of a process killed with SIGKILL are released by reapDead', async () => {
    const child = launch('orch-peer', 4, 4, 1);
    expect(await child.nextLine()).toBe('ready');
    child.proc.stdin.write('go\n');
    expect(JSON.parse(await child.nextLine())).toEqual({ granted: 1, refused: 0 });

    const strict = new MachineLedger({ dir, instanceId: 'orch-me', probeOtherInstances: false });
    const probing = new MachineLedger({ dir, instanceId: 'orch-me' });
    for (const l of [strict, probing]) l.registerPool('pool', { maxCpu: 4 });
    expect((await probing.tryReserve('pool', 'mine', 1, 0)).ok).toBe(false); // peer alive: full

    process.kill(child.proc.pid!, 'SIGKILL');
    await child.exited; // reaped by Node, so the pid is really gone (no zombie)

    expect(await strict.reapDead()).toBe(0); // strict rule: other instances on this boot are kept
    expect(await rows()).toHaveLength(1);
    expect(await probing.reapDead()).toBe(1);
    expect(await rows()).toEqual([]);
    expect((await probing.tryReserve('pool', 'mine', 4, 0)).ok).toBe(true);
  });

  it('own-instance rows of a dead pid are released even without probing other instances', async () => {
    const child = launch('orch-me', 2, 2, 1);
    expect(await child.nextLine()).toBe('ready');
    child.proc.stdin.write('go\n');
    expect(JSON.parse(await child.nextLine())).toEqual({ granted: 1, refused: 0 });
    process.kill(child.proc.pid!, 'SIGKILL');
    await child.exited;

    // Same instance id as the dead child: a restarted orchestrator finding its predecessor's rows.
    const restarted = new MachineLedger({ dir, instanceId: 'orch-me', probeOtherInstances: false });
    restarted.registerPool('pool', { maxCpu: 2 });
    expect((await restarted.tryReserve('pool', 'fresh', 2, 0)).ok).toBe(true);
    expect((await rows()).map((r) => r.agentId)).toEqual(['fresh']);
  });
});
