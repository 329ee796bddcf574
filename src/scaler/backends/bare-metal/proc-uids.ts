import { readdirSync } from 'node:fs';
import { readProcFile } from '../../../util/proc-tree.js';

/**
 * The processes on this host by real uid, read from /proc: which uids still run something (a uid
 * is only free to claim once nothing runs as it), and every process of one agent user, to kill
 * what it left behind. Kept apart from the uid pool (users.ts), which only asks these questions.
 */

/** Real uids of every live process (any of them still holds its uid). */
export async function uidsWithProcesses(): Promise<Set<number>> {
  const out = new Set<number>();
  for (const { uid } of await procUids()) if (uid !== undefined) out.add(uid);
  return out;
}

/**
 * The real uid of every process (undefined for a zombie). The reads are synchronous into one shared
 * buffer (see proc-tree.ts): through the promise API each one cost four trips through the thread
 * pool and a 64 KiB buffer, and a teardown running beside the next agent's start slowed it down.
 */
async function procUids(): Promise<{ pid: number; uid: number | undefined }[]> {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return []; // without /proc (not Linux) there is no process to find this way
  }
  const out: { pid: number; uid: number | undefined }[] = [];
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    // A turn for the event loop now and then on a host with many processes.
    if (out.length % 256 === 255) await new Promise((r) => setImmediate(r));
    out.push({ pid: Number(name), uid: processUid(Number(name)) });
  }
  return out;
}

/** The real uid of a live process; undefined for a zombie (it holds nothing and cannot be killed). */
export function processUid(pid: number): number | undefined {
  let status: string;
  try {
    status = readProcFile(`/proc/${pid}/status`);
  } catch {
    return undefined; // gone
  }
  if (/^State:\s+Z/m.test(status)) return undefined;
  const m = /^Uid:\s+(\d+)/m.exec(status);
  return m ? Number(m[1]) : undefined;
}

/** Live pids running as `uid`: everything an agent user started, whatever group or session it chose. */
export async function pidsOfUid(uid: number): Promise<number[]> {
  return (await procUids()).filter((p) => p.uid === uid).map((p) => p.pid);
}

/** SIGKILL every process of `uid` until none is left (a fork between scan and kill is caught next round). */
export async function killUid(uid: number, rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    const pids = await pidsOfUid(uid);
    if (!pids.length) return;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
