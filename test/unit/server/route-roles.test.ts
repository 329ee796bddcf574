/**
 * Every route the HTTP API registers has a role in the route table, so a new route cannot be
 * added without choosing who may call it; and the table's matcher finds each route's own rule.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ROLES, roleAllows } from '../../../src/access/roles.js';
import { createHttpApi } from '../../../src/server/http-api.js';
import { matchRoute, ROUTE_RULES } from '../../../src/server/route-roles.js';

function registered(): string[] {
  // Route registration runs no handler, so the dependencies are never touched.
  const app = createHttpApi({ store: {}, dispatcher: {}, metrics: {}, clock: {}, logger: {} } as never);
  return [...new Set(app.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method} ${r.path}`))];
}

describe('route table', () => {
  it('gives every registered route a rule, and lists no route the server lacks', () => {
    const routes = registered();
    expect(routes.length).toBeGreaterThan(20);
    expect(routes.filter((r) => !(r in ROUTE_RULES))).toEqual([]);
    expect(Object.keys(ROUTE_RULES).filter((r) => !routes.includes(r))).toEqual([]);
  });

  it('puts every /api/v1 route behind a role, and keeps writes away from viewers', () => {
    for (const [key, rule] of Object.entries(ROUTE_RULES)) {
      const [method, path] = key.split(' ') as [string, string];
      if (path.startsWith('/api/')) expect(ROLES, key).toContain(rule.access);
      if (path.startsWith('/api/') && method !== 'GET') expect(rule.access, key).not.toBe('viewer');
    }
    expect(ROUTE_RULES['POST /api/v1/access/tokens']!.access).toBe('admin');
    expect(ROUTE_RULES['POST /api/v1/agents/tokens']!.access).toBe('admin');
    expect(ROUTE_RULES['POST /api/v1/jobs/:id/cancel']!.access).toBe('operator');
  });

  it('matches a concrete path to its own rule, literal segments before parameters', () => {
    const segment = fc.stringMatching(/^[A-Za-z0-9._-]{1,20}$/).filter((s) => s !== 'tokens');
    fc.assert(
      fc.property(fc.constantFrom(...Object.keys(ROUTE_RULES)), segment, (key, id) => {
        const [method, path] = key.split(' ') as [string, string];
        const concrete = path.replace(/:[A-Za-z]+/g, id);
        expect(matchRoute(method, concrete)?.key).toBe(key);
      }),
    );
    expect(matchRoute('GET', '/api/v1/agents/tokens')?.key).toBe('GET /api/v1/agents/tokens');
    expect(matchRoute('HEAD', '/api/v1/jobs')?.key).toBe('GET /api/v1/jobs');
    expect(matchRoute('PUT', '/api/v1/jobs')).toBeUndefined();
    expect(matchRoute('GET', '/api/v1/jobs//logs')).toBeUndefined();
  });

  it('orders roles: each one allows what the ones before it allow', () => {
    fc.assert(
      fc.property(fc.constantFrom(...ROLES), fc.constantFrom(...ROLES), (held, needed) => {
        expect(roleAllows(held, needed)).toBe(ROLES.indexOf(held) >= ROLES.indexOf(needed));
      }),
    );
    expect(roleAllows('viewer', 'operator')).toBe(false);
    expect(roleAllows('admin', 'viewer')).toBe(true);
  });
});
