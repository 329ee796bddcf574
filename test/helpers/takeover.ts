import { Writable } from 'node:stream';
import { pino } from 'pino';
import { NODE } from './orchestrator.js';

/**
 * A job step that turns on its own agent: it looks for the agent's token where a process can read
 * another's secrets (its parent's /proc entries, the files it can reach, its own environment) and
 * registers as that agent with the raw protocol, claiming it has run nothing. Shared by the
 * takeover tests of every confinement, so each attacks the same way.
 */

/** An agent token as minted: `kici_` and 32 random bytes in base64url. */
export const TOKEN_RE = /kici_[A-Za-z0-9_-]{43}/;

/**
 * Registers as the step's agent with whatever token the search found, and prints how the
 * orchestrator answered. Self-contained (Node's own WebSocket, no import) and handed over in the
 * environment, so it runs wherever the step does: a sandbox's private /tmp or another uid cannot
 * hide it.
 */
const ATTACK = `
const ws = new WebSocket(process.env.ATTACK_URL);
ws.onopen = () => ws.send(JSON.stringify({ type: 'register', protocol: 1, agentId: process.env.KICI_AGENT_ID,
  token: process.env.ATTACK_TOKEN, labels: [], jobsDone: 0 }));
ws.onmessage = (e) => console.log('attack got ' + JSON.parse(String(e.data)).type);
ws.onerror = () => console.log('attack error');
ws.onclose = (e) => { console.log('attack closed ' + e.code); process.exit(0); };
`;

/**
 * The step: search the parent (the agent) for a token, then use whatever it found. The `thief saw`
 * line shows the search reached the real agent (its environment names its id, its descriptors are
 * listed), so a token there would have been found: a step that silently looked nowhere cannot pass.
 */
export const THIEF_STEP = [
  'agent_env=$(tr "\\0" "\\n" < /proc/$PPID/environ 2>/dev/null | grep -c "^KICI_AGENT_ID=$KICI_AGENT_ID$")',
  'echo "thief saw: agent-env=$agent_env fds=$(ls /proc/$PPID/fd 2>/dev/null | wc -l)"',
  'found=$( { tr "\\0" "\\n" < /proc/$PPID/environ; tr "\\0" "\\n" < /proc/$PPID/cmdline; env;',
  '  for f in /proc/$PPID/fd/*; do [ -f "$f" ] && head -c 65536 "$f"; done;',
  '  grep -rhoa "kici_[A-Za-z0-9_-]*" . 2>/dev/null; } 2>/dev/null | grep -oE "kici_[A-Za-z0-9_-]{43}" | head -n1 )',
  'echo "thief found: ${found:-nothing}"',
  'ATTACK_TOKEN="${found:-none}" "$ATTACK_NODE" -e "$ATTACK_SRC"',
].join('\n');

/** The thief job's environment: where to attack, and with what. */
export function thiefEnv(wsUrl: string): Record<string, string> {
  return { ATTACK_NODE: NODE, ATTACK_SRC: ATTACK, ATTACK_URL: wsUrl };
}

/** An orchestrator logger whose lines the test reads back, parsed and raw. */
export function logSink() {
  const lines: { level: number; msg: string; agentId?: string; securityEvent?: string }[] = [];
  const raw: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n'))
        if (l) {
          raw.push(l);
          lines.push(JSON.parse(l));
        }
      done();
    },
  });
  return { lines, raw, logger: pino({ level: 'info' }, sink) };
}
