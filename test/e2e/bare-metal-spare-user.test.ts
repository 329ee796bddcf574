import { chmod, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentUserPool } from '../../src/scaler/backends/bare-metal/users.js';
import { thisHolder } from '../../src/scaler/backends/bare-metal/spare-user.js';
import { outputLines, submit } from '../helpers/jobs.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * An agent started from the spare uid its scaler claimed ahead is confined like any other: its own
 * uid, and no read of another agent's home or of the orchestrator's data dir. Root only.
 */
let t: TestOrchestrator | undefined;
const strays: string[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const p of strays.splice(0)) await rm(p, { recursive: true, force: true });
});

const pool = new AgentUserPool();
/** The spare this process holds in the host's pool, if any. */
async function ourSpare(): Promise<number | undefined> {
  const claims = join(pool.root, '.uids');
  for (const name of await readdir(claims).catch(() => [] as string[])) {
    const holder = await readFile(join(claims, name, 'holder'), 'utf8').catch(() => '');
    if (holder === thisHolder()) return Number(name);
  }
  return undefined;
}

describe.runIf(process.platform === 'linux' && process.getuid?.() === 0)(
  'a cold agent from the spare uid',
  () => {
    it('runs as the spare uid and reads neither the other agent’s home nor the data dir; shutdown frees the spare', async () => {
      t = await startTestOrchestrator({
        config: bareMetalConfig({ maxAgents: 2 }, [
          { labels: ['linux'], binaryPath: AGENT_BIN, runAsUser: 'dynamic' },
        ]),
      });
      const rv = await mkdtemp(join(tmpdir(), 'kici-spare-rv-'));
      strays.push(rv);
      // A rendezvous both agents' uids may write (sticky, like /tmp).
      await chmod(rv, 0o1777);
      const [a] = await submit(t, {
        a: {
          runsOn: ['linux'],
          steps: [
            {
              run: [
                'echo secret > "$KICI_WORK_DIR/secret"',
                `echo "$KICI_WORK_DIR" > ${rv}/a-home`,
                `until [ -e ${rv}/b-done ]; do sleep 0.1; done`,
              ].join('\n'),
            },
          ],
        },
      });
      // A registered: its scaler claims the next agent's uid and home now.
      await eventually(
        async () => (await stat(join(rv, 'a-home')).catch(() => undefined))?.size,
        60_000,
        'job a running',
      );
      const spare = await eventually(ourSpare, 30_000, 'a spare uid held by this orchestrator');
      const [b] = await submit(t, {
        b: {
          runsOn: ['linux'],
          steps: [
            {
              run: [
                'echo "uid=$(id -u)"',
                'echo "home-mode=$(stat -c %a "$KICI_WORK_DIR")"',
                `other="$(cat ${rv}/a-home)"`,
                'cat "$other/secret" >/dev/null 2>&1; echo "read-other=$?"',
                'ls "$other" >/dev/null 2>&1; echo "list-other=$?"',
                `ls ${t.dataDir} >/dev/null 2>&1; echo "list-data=$?"`,
                `touch ${rv}/b-done`,
              ].join('\n'),
            },
          ],
        },
      });
      const jobs = await Promise.all([a!, b!].map((id) => t!.waitForJob(id, undefined, 60_000)));
      expect(jobs.map((j) => j.state)).toEqual(['succeeded', 'succeeded']);
      const lines = await outputLines(t, b!);
      const get = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
      expect(Number(get('uid')), lines.join('\n')).toBe(spare);
      expect(get('home-mode')).toBe('700');
      expect(get('read-other')).not.toBe('0');
      expect(get('list-other')).not.toBe('0');
      expect(get('list-data')).not.toBe('0');
      // B registered too, so another spare may be held now; shutdown releases it.
      await t.stop();
      t = undefined;
      expect(await ourSpare()).toBeUndefined();
    });
  },
);
