import { newConnectedAgent } from '../../src/dispatch/agent-registry.js';
import type { Dispatcher } from '../../src/dispatch/dispatcher.js';
import type { OrchestratorMessage } from '../../src/protocol/messages.js';

/**
 * A static agent on a real Dispatcher with no socket behind it: what the dispatcher sends it is
 * kept in `messages`, and `assigned()` lists the jobs it was given, in order.
 */
export function connectAgent(d: Dispatcher, id: string, labels = ['linux']) {
  const messages: OrchestratorMessage[] = [];
  const agent = newConnectedAgent({
    id,
    labels,
    scaled: null,
    nowMs: Date.now(),
    send: (m) => void messages.push(m),
    close: () => {},
  });
  d.registry.add(agent);
  d.noteStaticToken(id, labels, null);
  const assigned = () =>
    messages.flatMap((m) => (m.type === 'job.assign' ? [(m as { job: { id: string } }).job.id] : []));
  return { agent, messages, assigned };
}
