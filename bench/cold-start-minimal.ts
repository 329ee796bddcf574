/**
 * The cold start through the least any orchestrator does (minimal-server.ts): the same submit from
 * its own process, the same confined launch as the floor's, the agent's ack and job in one turn,
 * and the step's start stamped in whole ms as our server stamps it.
 */
import { handStartEnv, type ConfinedLaunch } from './cold-start-floor.ts';
import { lineChild } from './line-child.ts';
import { submitClient } from './submit-client.ts';
import type { Rig } from './cold-start.ts';

export async function minimalRig(confined: ConfinedLaunch): Promise<Rig> {
  const server = await lineChild<{ stepAt?: number }>('minimal-server.ts', 'the minimal server');
  const client = await submitClient();
  const url = server.ready.url as string;
  return {
    async once(i) {
      // Armed once the previous agent has exited: each start is cold, as ours are.
      await server.ask({
        op: 'arm',
        file: confined.file,
        args: confined.args,
        env: handStartEnv(`minimal-${i}`, confined),
        ...confined.as,
      });
      const started = server.ask({ op: 'wait' });
      const res = await client.post(
        `${url}/api/v1/runs`,
        { 'content-type': 'application/json' },
        { jobs: { cold: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } } },
      );
      if (res.status !== 201) throw new Error(`the minimal server answered ${res.status}`);
      return (await started).stepAt! - Math.floor(res.at);
    },
    async close() {
      await client.close();
      await server.close();
    },
  };
}
