// Preloaded into agent processes by `node bench/cold-start-trace.ts --agent` (through NODE_OPTIONS):
// marks the agent's own hops on the wall clock shared with the bench (ms since the epoch, with
// fractions), one JSON line per mark in <BENCH_MARKS_DIR>/<pid>.jsonl. Bench-only: nothing of it is
// in the product. Plain JavaScript, so Node loads it without the bench's TypeScript.
import { appendFileSync } from 'node:fs';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { performance } from 'node:perf_hooks';

const dir = process.env.BENCH_MARKS_DIR;
const now = () => performance.timeOrigin + performance.now();
const mark = (k, t = now()) => {
  if (!dir) return;
  try {
    appendFileSync(`${dir}/${process.pid}.jsonl`, `${JSON.stringify({ k, t })}\n`);
  } catch {
    // a mark that cannot be written is a mark missing from the table, never a failed start
  }
};

mark('agent: its Node started', performance.timeOrigin);
mark('agent: first line of ours ran');
const req = createRequire(process.argv[1] ?? import.meta.url);

// Spawns made by the agent (its dead-man switch, a step's shell), before and after the call.
const cp = req('node:child_process');
const spawnOf = cp.spawn;
cp.spawn = function (file, ...rest) {
  const name = String(file).split('/').pop();
  mark(`agent: spawn ${name} asked`);
  const child = spawnOf.call(this, file, ...rest);
  mark(`agent: spawn ${name} returned`);
  return child;
};
syncBuiltinESMExports();

// Frames on its WebSocket, by type, from the `ws` package the agent itself resolves.
let WebSocket;
try {
  WebSocket = req('ws');
} catch {
  WebSocket = undefined;
}
if (WebSocket) {
  const typeOf = (data) => {
    try {
      return JSON.parse(String(data)).type;
    } catch {
      return 'frame';
    }
  };
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data, ...rest) {
    mark(`agent: sent ${typeOf(data)}`);
    return send.call(this, data, ...rest);
  };
  const emit = WebSocket.prototype.emit;
  WebSocket.prototype.emit = function (event, ...args) {
    if (event === 'open') mark('agent: connection open');
    if (event !== 'message') return emit.call(this, event, ...args);
    const type = typeOf(args[0]);
    mark(`agent: got ${type}`);
    const out = emit.call(this, event, ...args);
    mark(`agent: done with ${type}`);
    return out;
  };
}
