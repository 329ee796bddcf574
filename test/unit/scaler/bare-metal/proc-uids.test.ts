import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { pidsOfUid, uidsWithProcesses } from '../../../../src/scaler/backends/bare-metal/proc-uids.js';

const linux = process.platform === 'linux';

describe.runIf(linux)('process uids read from /proc', () => {
  it('finds this process and a live child under their uid, and no pid under another', async () => {
    const child = spawn(process.execPath, ['-e', 'process.stdin.resume()'], {
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    await new Promise((r) => child.once('spawn', r));
    try {
      const uid = process.getuid!();
      expect(await uidsWithProcesses()).toContain(uid);
      const pids = await pidsOfUid(uid);
      expect(pids).toContain(process.pid);
      expect(pids).toContain(child.pid);
      // A uid no process runs as (far outside any system's range) owns nothing.
      expect(await pidsOfUid(2_000_000_000)).toEqual([]);
    } finally {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
  });
});
