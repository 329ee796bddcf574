/** A provisioning job's event payload file (it holds a claim code) does not outlive the job. */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { JobRunner } from '../../../src/agent/job-runner.js';

const left: string[] = [];
afterEach(async () => {
  for (const p of left.splice(0)) await rm(p, { force: true });
});

async function run(env: Record<string, string>, script: string): Promise<string> {
  const runner = new JobRunner({
    job: { id: 'job-ev', runId: 'run-ev', name: 'provision', env, steps: [{ name: 's', run: script }] },
    send: () => undefined,
  });
  return runner.run();
}

describe('event payload files', () => {
  it('are removed when the job ends, whether it failed or succeeded', async () => {
    for (const [script, result] of [
      ['printf x > "$KICI_EVENT_PATH"; exit 3', 'failed'],
      ['printf x > "$KICI_EVENT_PATH"', 'succeeded'],
    ] as const) {
      const path = `/tmp/kici-event-${randomUUID()}.json`;
      left.push(path);
      expect(await run({ KICI_EVENT_PATH: path }, `${script}`)).toBe(result);
      expect(existsSync(path)).toBe(false);
    }
  });

  it('any other path named there is left alone', async () => {
    const path = `/tmp/kici-not-an-event-${randomUUID()}.json`;
    left.push(path);
    await writeFile(path, 'keep');
    expect(await run({ KICI_EVENT_PATH: path }, 'true')).toBe('succeeded');
    expect(existsSync(path)).toBe(true);
  });
});
