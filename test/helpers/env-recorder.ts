/**
 * Stand-in programs that write down the environment they were started with (read back from
 * /proc/<pid>/environ, so it is what the kernel handed over, not what a shell makes of it), for
 * tests that check what a spawn passes on. Each run appends one record to `<dumps>/<name>.env`.
 */
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { resolveTool } from '../../src/util/system-tools.js';

/** Ends each record: an environment holds no such byte. */
const END = '\x1e';

export class EnvRecorder {
  private constructor(
    /** Where the stand-ins are written: put it first on PATH to have them found by name. */
    readonly bin: string,
    private readonly dumps: string,
  ) {}

  static async create(root: string): Promise<EnvRecorder> {
    const rec = new EnvRecorder(join(root, 'bin'), join(root, 'dumps'));
    await mkdir(rec.bin, { recursive: true });
    await mkdir(rec.dumps, { recursive: true });
    return rec;
  }

  /** A stand-in for `name` in `bin`: records its environment, then runs `then` (a shell line). */
  async tool(name: string, then = 'exit 0'): Promise<string> {
    const path = join(this.bin, name);
    const out = join(this.dumps, `${name}.env`);
    // cat by its full path: the PATH under test may not lead to it.
    const cat = resolveTool('cat');
    await writeFile(
      path,
      `#!/bin/sh\n'${cat}' /proc/$$/environ >> '${out}'\nprintf '${END}' >> '${out}'\n${then}\n`,
    );
    await chmod(path, 0o755);
    return path;
  }

  /** Every environment `name` was started with so far, oldest first. */
  async envsOf(name: string): Promise<Record<string, string>[]> {
    const records = (await this.text(name)).split(END).filter(Boolean);
    return records.map((r) => {
      const vars = r.split('\0').filter(Boolean);
      return Object.fromEntries(
        vars.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
      );
    });
  }

  /** How many runs of `name` have finished recording. */
  async count(name: string): Promise<number> {
    return (await this.text(name)).split(END).length - 1;
  }

  /** Drop what `name` recorded so far. */
  async forget(name: string): Promise<void> {
    await rm(join(this.dumps, `${name}.env`), { force: true });
  }

  private text(name: string): Promise<string> {
    return readFile(join(this.dumps, `${name}.env`), 'utf8').catch(() => '');
  }
}
