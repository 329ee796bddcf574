/**
 * The real host ports of `kici-admin firecracker`: a record that is absent means nothing was
 * provisioned; one that is there but cannot be read must not be taken for that, or teardown would
 * report "nothing to remove" and delete the record of what provision made.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { realHostPorts } from '../../../src/cli/admin/firecracker-host-commands.js';
import { UserError } from '../../../src/util/errors.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-fc-ports-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('firecracker host ports: readText', () => {
  it('reads a record, and reads an absent one as no record', async () => {
    const { fs } = realHostPorts(false);
    await writeFile(join(dir, 'record.json'), '{"bridge":"kici-br0"}\n');
    expect(await fs.readText(join(dir, 'record.json'))).toBe('{"bridge":"kici-br0"}\n');
    expect(await fs.readText(join(dir, 'missing.json'))).toBeUndefined();
  });

  it('refuses a record that is there but cannot be read, naming its path', async () => {
    const { fs } = realHostPorts(false);
    const record = join(dir, 'firecracker-host.json');
    await mkdir(record);
    const read = fs.readText(record);
    await expect(read).rejects.toBeInstanceOf(UserError);
    await expect(read).rejects.toThrow(`cannot read ${record}: EISDIR`);
  });
});
