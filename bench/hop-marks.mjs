// Preload (node --import) for `node bench/hops.ts`: appends "<role> <hop> <wall ms>" to $HOP_TRACE at
// each hop of a warm hit, in the server and agent processes of any build, without touching them:
// the submit's request, each fdatasync, the job.assign frame written and parsed, the HTTP answer,
// the agent's workspace, the step's spawn (or its hand-over to a ready shell), job.started read.
import cp from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { syncBuiltinESMExports } from 'node:module';
import { performance } from 'node:perf_hooks';

const file = process.env.HOP_TRACE;
const role = /agent/.test(process.argv[1] ?? '') ? 'agent' : 'server';
const mark = (name) =>
  fs.appendFileSync(file, `${role} ${name} ${(performance.timeOrigin + performance.now()).toFixed(3)}\n`);
// The bench's step prints its clock with this; it tells the step's spawn from any other.
const STEP = '%s%N';

const emit = http.Server.prototype.emit;
http.Server.prototype.emit = function (ev, req, ...rest) {
  if (ev === 'request' && req.method === 'POST' && req.url === '/api/v1/runs') mark('request in');
  return emit.call(this, ev, req, ...rest);
};
const write = net.Socket.prototype.write;
net.Socket.prototype.write = function (chunk, ...rest) {
  const s =
    typeof chunk === 'string' ? chunk : chunk?.length < 1e5 ? Buffer.from(chunk).toString('latin1') : '';
  if (s.includes('"job.assign"')) mark('job.assign written');
  if (s.startsWith('HTTP/1.1 201')) mark('HTTP 201 written');
  return write.call(this, chunk, ...rest);
};
const end = net.Socket.prototype.end;
net.Socket.prototype.end = function (chunk, ...rest) {
  if (typeof chunk === 'string' && chunk.includes(STEP)) mark('step handed to a ready shell');
  return end.call(this, chunk, ...rest);
};
const parse = JSON.parse;
JSON.parse = function (s, ...rest) {
  if (role === 'agent' && typeof s === 'string' && s.includes('"job.assign"')) mark('job.assign read');
  if (role === 'server' && typeof s === 'string' && s.startsWith('{"type":"job.started"'))
    mark('job.started read');
  return parse.call(this, s, ...rest);
};
const fdatasync = fs.fdatasyncSync;
fs.fdatasyncSync = function (...a) {
  mark('fdatasync begins');
  try {
    return fdatasync.apply(this, a);
  } finally {
    mark('fdatasync ends');
  }
};
const spawn = cp.spawn;
cp.spawn = function (cmd, args, ...rest) {
  const step = Array.isArray(args) && String(args[1] ?? '').includes(STEP);
  if (step) mark('step spawn called');
  const r = spawn.call(this, cmd, args, ...rest);
  if (step) mark('step spawn returned');
  return r;
};
const mkdtemp = fs.mkdtempSync;
fs.mkdtempSync = function (...a) {
  mark('workspace made');
  return mkdtemp.apply(this, a);
};
syncBuiltinESMExports();
