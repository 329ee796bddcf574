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
