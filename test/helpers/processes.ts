import { readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';

/** Pids of live processes whose environment contains `needle` (e.g. an agent's orchestrator URL). */
export async function pidsWithEnv(needle: string): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const env = await readFile(`/proc/${name}/environ`, 'utf8');
      if (env.split('\0').includes(needle)) out.push(Number(name));
    } catch {
      // gone or not ours to read
    }
  }
  return out;
}

/** Each child of `pid` with its argv, read from /proc. */
export function childrenOf(pid: number): { pid: number; argv: string[] }[] {
  const ids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  return ids.flatMap((c) => {
    try {
      return [
        { pid: Number(c), argv: readFileSync(`/proc/${c}/cmdline`, 'utf8').split('\0').filter(Boolean) },
      ];
    } catch {
      return []; // gone meanwhile
    }
  });
}
