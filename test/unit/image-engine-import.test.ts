/**
 * Importing a packed rootfs into an engine, against a stand-in engine on a unix socket that answers
 * the few Docker API calls the import makes. Podman's import also names the image <repo>:latest;
 * that spare name is dropped when the engine has it, skipped when it has not (404), and an engine
 * that fails the look itself is reported, not taken for "no such name".
 */
import { createServer, type Server } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { importRootfs } from '../../src/image/engine-import.js';

const ID = 'sha256:' + 'ab'.repeat(32);

let dir: string;
let server: Server;
let calls: string[];
/** How the stand-in answers GET /images/<repo>:latest/json. */
let latest: { status: number; body: unknown };

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-engine-import-'));
  calls = [];
  server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '').split('?')[0]!);
    calls.push(`${req.method} ${path}`);
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    req.resume();
    req.on('end', () => {
      if (req.method === 'POST' && path === '/images/create') {
        // A progress stream: one JSON object a line.
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ status: ID }) + '\n');
      }
      if (req.method === 'POST' && path.endsWith('/tag')) return json(201, {});
      if (req.method === 'GET' && path === '/images/kici-agent:latest/json')
        return json(latest.status, latest.body);
      if (req.method === 'GET' && path.endsWith('/json')) return json(200, { Id: ID, Size: 1234 });
      if (req.method === 'DELETE') return json(200, [{ Untagged: 'kici-agent:latest' }]);
      json(500, { message: `unexpected ${req.method} ${path}` });
    });
  });
  await new Promise<void>((ok) => server.listen(join(dir, 'engine.sock'), ok));
  await writeFile(join(dir, 'rootfs.tar'), 'not really a tar: the stand-in only drains it');
});
afterEach(async () => {
  await new Promise((ok) => server.close(ok));
  await rm(dir, { recursive: true, force: true });
});

const run = () =>
  importRootfs(`unix://${join(dir, 'engine.sock')}`, join(dir, 'rootfs.tar'), 'kici-agent:1.2.3', []);

describe('importRootfs: the spare <repo>:latest name', () => {
  it('is dropped when it names the image just imported', async () => {
    latest = { status: 200, body: { Id: ID, Size: 1234 } };
    expect(await run()).toBe(1234);
    expect(calls).toContain('DELETE /images/kici-agent:latest');
  });

  it('is skipped when the engine has no such name', async () => {
    latest = { status: 404, body: { message: 'No such image: kici-agent:latest' } };
    expect(await run()).toBe(1234);
    expect(calls.some((c) => c.startsWith('DELETE'))).toBe(false);
  });

  it('fails the import when the engine fails the look itself', async () => {
    latest = { status: 500, body: { message: 'image store is corrupt' } };
    await expect(run()).rejects.toThrow(/image store is corrupt/);
  });
});
