import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QemuDriver } from '../../../../src/scaler/backends/firecracker/qemu-driver.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-qcd-'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('qemu config drive after the agent acknowledged its config', () => {
  it('is zeroed in place: same size (the attached device stays valid), no token left on the host', async () => {
    const drive = join(dir, 'config.env');
    const content = Buffer.alloc(64 * 1024);
    Buffer.from("KICI_AGENT_TOKEN='tok-secret'\n").copy(content);
    await writeFile(drive, content);
    const driver = new QemuDriver({
      binary: 'qemu-system-x86_64',
      accel: 'tcg',
      logger: pino({ level: 'silent' }),
      hostEnv: process.env,
    });
    await driver.configAcknowledged({ id: 'vm-1', dir });
    const after = await readFile(drive);
    expect(after.length).toBe(64 * 1024);
    expect(after.every((b) => b === 0)).toBe(true);
  });
});
