/**
 * A wall-clock offset for one process through libfaketime, changed while it runs by rewriting a
 * file: the process sees its wall clock step, the host's and the monotonic clock do not move.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CANDIDATES = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
];

/** The library's path; throws naming the package to install when it is missing. */
export function libfaketime(): string {
  const found = CANDIDATES.find((p) => existsSync(p));
  if (!found)
    throw new Error('libfaketime not found: apt-get install faketime (scripts/system/setup.sh does)');
  return found;
}

export interface ClockOffset {
  /** Environment that puts a process on this offset. */
  env: NodeJS.ProcessEnv;
  /** Step the process's wall clock to `offset` from the real time: "+1h", "-1h", "+0". */
  set(offset: string): Promise<void>;
  close(): Promise<void>;
}

export async function clockOffset(initial = '+0'): Promise<ClockOffset> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-faketime-'));
  const file = join(dir, 'offset');
  await writeFile(file, `${initial}\n`);
  return {
    env: {
      LD_PRELOAD: libfaketime(),
      FAKETIME_TIMESTAMP_FILE: file,
      // Read the file on every call, so a rewrite takes effect at once.
      FAKETIME_NO_CACHE: '1',
      // A real clock step moves the wall clock only; timers and liveness run on the monotonic one.
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
      // A clock step is held until every agent has sent two heartbeats: 3 s apart, not 10. Not 1 s,
      // which allows a silence of only 3 s: a loaded host delays a beat by more than that. (Podman
      // agents silent for 10-30 s here were the bridge's MAC moving, which the system tier now pins:
      // scripts/system/pin-bridge-macs.sh.)
      KICI_AGENT_HEARTBEAT_MS: '3000',
    },
    set: (offset) => writeFile(file, `${offset}\n`),
    close: () => rm(dir, { recursive: true, force: true }),
  };
}

export interface AgentBeatView {
  id: string;
  state: string;
  connectedAt: string;
  lastSeenAt: string;
  uptimeMs: number | null;
}

/**
 * Where on the agent's own (monotonic) timeline the server last heard from it: lastSeenAt minus
 * connectedAt, both placed back from the same "now", so the wall clock cancels out.
 */
const seenMark = (a: AgentBeatView) => Date.parse(a.lastSeenAt) - Date.parse(a.connectedAt);

/**
 * Wait until every one of `ids` has sent two heartbeats from now on, so at least one liveness check
 * ran between them. Throws when one of them is disconnected or shows a negative uptime meanwhile.
 */
export async function twoBeats(
  list: () => Promise<AgentBeatView[]>,
  ids: readonly string[],
  timeoutMs = 60_000,
): Promise<void> {
  const first = await list();
  const start = new Map(first.map((a) => [a.id, seenMark(a)]));
  const seen = new Map<string, number>();
  const until = Date.now() + timeoutMs;
  let last: AgentBeatView[];
  for (;;) {
    last = await list();
    for (const a of last) {
      if (!ids.includes(a.id)) continue;
      if (a.state === 'disconnected') throw new Error(`agent ${a.id} was disconnected after the clock step`);
      if ((a.uptimeMs ?? 0) < 0) throw new Error(`agent ${a.id} shows a negative uptime (${a.uptimeMs})`);
      const mark = seenMark(a);
      if (!seen.has(a.id)) {
        if (mark > (start.get(a.id) ?? 0)) seen.set(a.id, mark);
      } else if (mark > seen.get(a.id)!) seen.set(a.id, Infinity);
    }
    if (ids.every((id) => seen.get(id) === Infinity)) return;
    if (Date.now() > until)
      throw new Error(
        `no two heartbeats from ${ids.join(', ')} within ${timeoutMs} ms; ` +
          `at the start ${JSON.stringify(first.filter((a) => ids.includes(a.id)))}, ` +
          `at the end ${JSON.stringify(last.filter((a) => ids.includes(a.id)))}`,
      );
    await new Promise((r) => setTimeout(r, 250));
  }
}
