/** `--version` on the three commands prints package.json's version, read at run time. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ADMIN_BIN, AGENT_BIN, ORCH_BIN, ROOT, runNode } from '../helpers/orchestrator.js';

const version = async () =>
  (JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

describe('--version', () => {
  for (const [name, bin] of [
    ['kici-orchestrator', ORCH_BIN],
    ['kici-admin', ADMIN_BIN],
    ['kici-agent', AGENT_BIN],
  ] as const) {
    it(`${name} --version and -V print the package version and exit 0`, async () => {
      const expected = await version();
      expect(expected).toMatch(/^\d+\.\d+\.\d+/);
      for (const flag of ['--version', '-V']) {
        // No agent settings in the environment: --version must not need them.
        const res = await runNode([bin, flag], {
          KICI_ORCHESTRATOR_URL: '',
          KICI_AGENT_ID: '',
          KICI_AGENT_TOKEN: '',
        }).exited;
        expect({ flag, code: res.code, stdout: res.stdout, stderr: res.stderr }).toEqual({
          flag,
          code: 0,
          stdout: `${expected}\n`,
          stderr: '',
        });
      }
    });
  }
});
