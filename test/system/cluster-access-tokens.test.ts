import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_BIN, runNode } from '../helpers/orchestrator.js';
import { startOrchestratorProcess, type OrchProcess } from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * Access tokens across three orchestrators on one PostgreSQL, each with its own bootstrap token
 * file as on its own host: every instance accepts every token, a role is enforced the same way
 * everywhere, a revoke on one instance is refused by all three within a second, every call
 * leaves an audit row naming its token, and an instance that finds a live bootstrap token in its
 * file does not make another.
 */

let db: TestDatabase;
let etc: string;
const orchs: OrchProcess[] = [];
const tag = randomBytes(3).toString('hex');

beforeAll(async () => {
  db = await freshTestDatabase('claccess');
  etc = await mkdtemp(join(tmpdir(), 'kici-etc-cluster-'));
});
afterAll(async () => {
  for (const o of orchs) await o.stop();
  await db.drop();
  await rm(etc, { recursive: true, force: true });
});

async function call(o: OrchProcess, token: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${o.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as { problems?: string[] } };
}

async function admin(o: OrchProcess, token: string, ...args: string[]) {
  const r = await runNode([ADMIN_BIN, '--server', o.url, '--token', token, ...args]).exited;
  if (r.code !== 0) throw new Error(`kici-admin ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

describe('access tokens in a cluster', () => {
  it('a token made on A works on B and C; a revoke on B is refused on all three within 1 s', async () => {
    for (const name of ['a', 'b', 'c'])
      orchs.push(
        await startOrchestratorProcess({
          databaseUrl: db.url,
          adminTokenFile: join(etc, name, 'admin-token'),
          args: ['--instance-id', `acc-${name}-${tag}`],
        }),
      );
    const [a, b, c] = orchs as [OrchProcess, OrchProcess, OrchProcess];

    // Each host's bootstrap token is accepted by every instance.
    for (const owner of orchs)
      for (const o of orchs)
        expect((await call(o, owner.adminToken, 'GET', '/api/v1/jobs')).status).toBe(200);

    const made = (role: string, name: string) =>
      admin(a, a.adminToken, 'access', 'token', 'create', '--name', name, '--role', role, '--json').then(
        (out) => JSON.parse(out) as { id: string; token: string },
      );
    const viewer = await made('viewer', `dash-${tag}`);
    const operator = await made('operator', `ci-${tag}`);

    for (const o of orchs) {
      expect((await call(o, viewer.token, 'GET', '/api/v1/jobs')).status).toBe(200);
      const cancel = await call(o, viewer.token, 'POST', '/api/v1/jobs/j-nothing/cancel');
      expect(cancel.status).toBe(403);
      expect(cancel.body.problems?.[0]).toMatch(/needs the operator role/);
      const mint = await call(o, operator.token, 'POST', '/api/v1/access/tokens', {
        name: 'x',
        role: 'viewer',
      });
      expect(mint.status).toBe(403);
      expect(mint.body.problems?.[0]).toMatch(/needs the admin role/);
    }

    await admin(b, b.adminToken, 'access', 'token', 'revoke', viewer.id);
    const revokedAt = Date.now();
    const statuses = await Promise.all(orchs.map((o) => call(o, viewer.token, 'GET', '/api/v1/jobs')));
    const tookMs = Date.now() - revokedAt;
    expect(statuses.map((s) => s.status)).toEqual([401, 401, 401]);
    expect(tookMs).toBeLessThan(1_000);

    const rows = JSON.parse(await admin(c, c.adminToken, 'audit', 'list', '--json')) as {
      tokenName: string | null;
      action: string;
      result: string;
      status: number;
    }[];
    const count = (name: string, action: string, result: string) =>
      rows.filter((r) => r.tokenName === name && r.action === action && r.result === result).length;
    expect(count(`dash-${tag}`, 'job.cancel', 'denied')).toBe(3);
    expect(count(`ci-${tag}`, 'access-token.create', 'denied')).toBe(3);
    expect(count(`dash-${tag}`, 'job.list', 'denied')).toBe(3);
    // The calls that were allowed are recorded too, under the token that made them: A's bootstrap
    // token created both tokens, B's revoked one.
    expect(count(`bootstrap@acc-a-${tag}`, 'access-token.create', 'ok')).toBe(2);
    expect(count(`bootstrap@acc-b-${tag}`, 'access-token.revoke', 'ok')).toBe(1);
    expect(
      rows.some(
        (r) => r.action === 'access-token.revoke' && r.result === 'ok' && r.tokenName?.includes('acc-b'),
      ),
    ).toBe(true);

    // A fourth instance whose file holds A's live token uses it and makes no other.
    const d = await startOrchestratorProcess({
      databaseUrl: db.url,
      adminTokenFile: join(etc, 'a', 'admin-token'),
      args: ['--instance-id', `acc-d-${tag}`],
    });
    orchs.push(d);
    expect(d.adminToken).toBe(a.adminToken);
    const list = JSON.parse(await admin(d, d.adminToken, 'access', 'token', 'list', '--json')) as {
      bootstrap: boolean;
    }[];
    expect(list.filter((t) => t.bootstrap)).toHaveLength(3);
  });
});
