import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { joinLowPort, LOW_MAC, macOf } from '../helpers/bridge-ports.js';
import { eventually } from '../helpers/orchestrator.js';

/**
 * The system tier's bridge-MAC pinner (scripts/system/pin-bridge-macs.sh), which stands in for the
 * fix netavark 1.4 lacks, in a namespace of its own: a bridge it has seen keeps its address when a
 * port with a lower MAC joins; without it, the kernel hands the bridge that port's address.
 */
const run = promisify(execFile);
const ns = `kici-pin-${randomBytes(3).toString('hex')}`;
const ip = (...args: string[]) => run('ip', ['-n', ns, ...args]);

/** How the kernel came by a link's address: 3 (NET_ADDR_SET) once someone set it. */
const ADDR_SET = '3';
const assignType = async (dev: string) =>
  (await run('ip', ['netns', 'exec', ns, 'cat', `/sys/class/net/${dev}/addr_assign_type`])).stdout.trim();

/** A bridge, then a port with the lowest MAC on it; returns the bridge's address before and after. */
async function bridgeWithLowPort(br: string, port: string): Promise<[string, string]> {
  await ip('link', 'add', br, 'type', 'bridge');
  await ip('link', 'set', br, 'up');
  const before = await macOf(ip, br);
  await joinLowPort(ip, br, port);
  return [before, await macOf(ip, br)];
}

beforeAll(() => run('ip', ['netns', 'add', ns]));
afterAll(() => run('ip', ['netns', 'del', ns]));

describe('pin-bridge-macs.sh', () => {
  it('control: with no pinner, a bridge takes the lower MAC of a port that joins it', async () => {
    const [before, after] = await bridgeWithLowPort('kbr0', 'kpt0');
    expect(before).not.toBe(LOW_MAC);
    expect(after).toBe(LOW_MAC);
  });

  it('pins a bridge that is there and one made while it runs; stops, with its monitor, on TERM', async () => {
    let children: string[] = [];
    const pinner = spawn('bash', ['scripts/system/pin-bridge-macs.sh', ns], { stdio: 'ignore' });
    try {
      // The control's bridge, there before it started, is pinned first.
      await eventually(async () => (await assignType('kbr0')) === ADDR_SET, 10_000, 'kbr0 pinned');
      await ip('link', 'add', 'kbr1', 'type', 'bridge');
      await eventually(async () => (await assignType('kbr1')) === ADDR_SET, 10_000, 'kbr1 pinned');
      const first = await macOf(ip, 'kbr1');
      await joinLowPort(ip, 'kbr1', 'kpt1');
      expect(await macOf(ip, 'kbr1')).toBe(first);
      await ip('link', 'del', 'dev', 'kpt1');
      expect(await macOf(ip, 'kbr1')).toBe(first);
      children = (await readFile(`/proc/${pinner.pid}/task/${pinner.pid}/children`, 'utf8'))
        .trim()
        .split(/\s+/);
      expect(children.length).toBeGreaterThan(0); // its ip monitor
    } finally {
      pinner.kill('SIGTERM');
      const [code, signal] = (await once(pinner, 'exit')) as [number | null, string | null];
      expect({ code, signal }).toEqual({ code: 0, signal: null });
    }
    // Its `ip monitor` went with it (a zombie's entry lingers only until its parent, gone, is reaped).
    const alive = (pid: string) =>
      readFile(`/proc/${pid}/stat`, 'utf8').then(
        (t) => !/\) Z /.test(t),
        () => false,
      );
    await eventually(
      async () => !(await Promise.all(children.map(alive))).some(Boolean),
      10_000,
      'the monitor gone',
    );
  });
});
