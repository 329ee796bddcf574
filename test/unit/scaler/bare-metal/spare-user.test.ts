import { mkdtemp, readdir, readFile, rm, stat, mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentUserPool } from '../../../../src/scaler/backends/bare-metal/users.js';
import { holderAlive, thisHolder } from '../../../../src/scaler/backends/bare-metal/spare-user.js';
import { startTicksOf } from '../../../../src/util/proc-tree.js';

/**
 * The spare agent uid a pool claims ahead of the next agent. Root only (homes are chowned to the
 * uid); each test has its own pool root and a uid range no other pool on the host uses.
 */
const FIRST = 64_100;
const roots: string[] = [];
afterEach(async () => {
  for (const r of roots.splice(0)) await rm(r, { recursive: true, force: true });
});
async function newRoot(): Promise<string> {
  const r = await mkdtemp(join(tmpdir(), 'kici-spare-'));
  roots.push(r);
  return join(r, 'homes');
}
const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );
const claims = async (root: string) =>
  Object.fromEntries(
    await Promise.all(
      (await readdir(join(root, '.uids')).catch(() => [] as string[])).map(
        async (n) => [n, await readFile(join(root, '.uids', n, 'agent'), 'utf8').catch(() => '')] as const,
      ),
    ),
  );
const settled = (pool: AgentUserPool) => pool.whenIdle();

describe.runIf(process.platform === 'linux' && process.getuid?.() === 0)('the spare agent uid', () => {
  it('is handed over whole: the agent gets an empty 0700 home of its own uid, and the claim names it', async () => {
    const root = await newRoot();
    const pool = new AgentUserPool(root, FIRST, 4);
    pool.prepareSpare();
    const first = await pool.acquire('agent-a'); // queued behind the spare: takes it
    expect(pool.spareUid()).toBeUndefined();
    expect(first.home).toBe(pool.homeOf('agent-a'));
    const s = await stat(first.home);
    expect([s.uid, s.gid, s.mode & 0o7777]).toEqual([first.uid, first.uid, 0o700]);
    expect(await readdir(first.home)).toEqual([]);
    expect(await claims(root)).toEqual({ [String(first.uid)]: 'agent-a' });
    expect(await exists(join(root, '.uids', String(first.uid), 'holder'))).toBe(false);
    expect(await pool.uidOf('agent-a')).toBe(first.uid);
    await pool.release('agent-a', first.uid);
    expect(await claims(root)).toEqual({});
    await pool.close();
  });

  it('is never handed to two agents, nor held while an agent has its uid (random acquire, release, prepare)', async () => {
    const op = fc.oneof(
      fc.constant({ kind: 'acquire' as const }),
      fc.constant({ kind: 'prepare' as const }),
      fc.nat(3).map((i) => ({ kind: 'release' as const, i })),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 10 }), async (ops) => {
        const root = await newRoot();
        const pool = new AgentUserPool(root, FIRST, 5);
        const live: { id: string; uid: number }[] = [];
        let n = 0;
        for (const o of ops) {
          if (o.kind === 'prepare') pool.prepareSpare();
          else if (o.kind === 'acquire' && live.length < 3) {
            const id = `agent-${n++}`;
            live.push({ id, uid: (await pool.acquire(id)).uid });
          } else if (o.kind === 'release' && live[o.i]) {
            const [gone] = live.splice(o.i, 1);
            await pool.release(gone!.id, gone!.uid);
          }
          await settled(pool);
          const uids = live.map((a) => a.uid);
          expect(new Set(uids).size).toBe(uids.length);
          const spare = pool.spareUid();
          if (spare !== undefined) expect(uids).not.toContain(spare);
          const held = await claims(root);
          for (const a of live) expect(held[String(a.uid)]).toBe(a.id);
          expect(Object.keys(held).length).toBe(live.length + (spare === undefined ? 0 : 1));
        }
        await pool.close();
        for (const a of live) await pool.release(a.id, a.uid);
        expect(await claims(root)).toEqual({});
        await rm(join(root, '..'), { recursive: true, force: true });
      }),
      { numRuns: 12 },
    );
  });

  it('is released on close (home and claim), after which acquire still claims for itself', async () => {
    const root = await newRoot();
    const pool = new AgentUserPool(root, FIRST, 4);
    pool.prepareSpare();
    await settled(pool);
    const spare = pool.spareUid()!;
    expect(spare).toBeGreaterThanOrEqual(FIRST);
    expect(await exists(join(root, `.spare-${spare}`))).toBe(true);
    await pool.close();
    expect(pool.spareUid()).toBeUndefined();
    expect(await exists(join(root, `.spare-${spare}`))).toBe(false);
    expect(await claims(root)).toEqual({});
    pool.prepareSpare(); // a closed pool keeps no spare
    const u = await pool.acquire('after-close');
    expect(pool.spareUid()).toBeUndefined();
    await pool.release('after-close', u.uid);
  });

  it("after a crash: a dead holder's spare is freed by the next pool; a live holder's is kept and not taken", async () => {
    const root = await newRoot();
    const other = new AgentUserPool(root, FIRST, 4); // another live orchestrator on the host
    other.prepareSpare();
    await settled(other);
    const othersSpare = other.spareUid()!;
    expect(othersSpare).toBe(FIRST);
    // A spare left by a process that is gone: its pid is free again, or its start time differs.
    const dead = FIRST + 1;
    await mkdir(join(root, '.uids', String(dead)));
    const deadHolder = `${process.pid} ${(startTicksOf(process.pid) ?? 0) + 1}`;
    await writeFile(join(root, '.uids', String(dead), 'holder'), deadHolder);
    await writeFile(join(root, '.uids', String(dead), 'agent'), `.spare-${dead}`);
    await mkdir(join(root, `.spare-${dead}`), { mode: 0o700 });
    await writeFile(join(root, `.spare-${dead}`, 'left-behind'), 'x');
    const restarted = new AgentUserPool(root, FIRST, 4);
    restarted.prepareSpare();
    await settled(restarted);
    // Freed, then claimed afresh (an empty home) with this process as its holder.
    expect(restarted.spareUid()).toBe(dead);
    expect(await readFile(join(root, '.uids', String(dead), 'holder'), 'utf8')).toBe(thisHolder());
    expect(await readdir(join(root, `.spare-${dead}`))).toEqual([]);
    const a = await restarted.acquire('x');
    const b = await restarted.acquire('y');
    expect([a.uid, b.uid]).not.toContain(othersSpare);
    expect((await claims(root))[String(othersSpare)]).toBe(`.spare-${othersSpare}`);
    await restarted.close();
    await other.close();
    await restarted.release('x', a.uid);
    await restarted.release('y', b.uid);
    expect(await claims(root)).toEqual({});
  });

  it('says so when a spare whose hand-over failed cannot be dropped; the agent gets a uid of its own', async () => {
    const root = await newRoot();
    const warned: { msg: string; context: Record<string, unknown> }[] = [];
    const pool = new AgentUserPool(root, FIRST, 4, (msg, context) => warned.push({ msg, context }));
    pool.prepareSpare();
    await settled(pool);
    const spare = pool.spareUid()!;
    // The hand-over's first write meets a directory in its place; the drop after it fails too.
    await mkdir(join(root, '.uids', String(spare), 'agent.part', 'x'), { recursive: true });
    (pool as unknown as { dropSpare(): Promise<void> }).dropSpare = () =>
      Promise.reject(new Error('EIO: i/o error, rmdir'));
    const a = await pool.acquire('agent-a');
    expect(a.uid).not.toBe(spare);
    expect(warned).toEqual([
      {
        msg: expect.stringContaining(`could not drop the spare agent uid ${spare}`),
        context: { uid: spare, home: join(root, `.spare-${spare}`), err: 'EIO: i/o error, rmdir' },
      },
    ]);
    await pool.release('agent-a', a.uid);
    await pool.close();
  });

  it('a holder is alive only while the same process (pid and start time) runs', () => {
    expect(holderAlive(thisHolder())).toBe(true);
    expect(holderAlive(`${process.pid} ${(startTicksOf(process.pid) ?? 0) + 1}`)).toBe(false);
    expect(holderAlive('')).toBe(false);
    expect(holderAlive('2000000000 5')).toBe(false);
  });
});
