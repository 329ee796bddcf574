/**
 * docs/api.md cannot drift from the server. Every route the Hono app registers has a
 * `### METHOD /path` heading and every heading is a registered route; every field of the request
 * schemas (run spec, token body) and of the job view is named in the doc. A heading marked
 * "(pending merge" documents a route another branch adds: it must not exist yet, so the marker is
 * removed once it does.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { createHttpApi, jobView } from '../../../src/server/http-api.js';
import { tokenBodySchema } from '../../../src/server/http-validation.js';

const DOC = join(import.meta.dirname, '../../../docs/api.md');

function serverRoutes(): Set<string> {
  // Route registration runs no handler, so the dependencies are never touched.
  const app = createHttpApi({ store: {}, dispatcher: {}, metrics: {}, clock: {}, logger: {} } as never);
  return new Set(app.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method} ${r.path}`));
}

async function documented(): Promise<{ routes: Set<string>; pending: Set<string>; text: string }> {
  const text = await readFile(DOC, 'utf8');
  const routes = new Set<string>();
  const pending = new Set<string>();
  const sections = text.split(/^### /m).slice(1);
  for (const section of sections) {
    const [heading = '', ...body] = section.split('\n');
    const m = /^(GET|POST|PUT|PATCH|DELETE) (\/\S*)$/.exec(heading.trim());
    if (!m) continue;
    const key = `${m[1]} ${m[2]}`;
    if (body.join('\n').trimStart().startsWith('(pending merge')) pending.add(key);
    else routes.add(key);
  }
  return { routes, pending, text };
}

/** Every property name in a JSON schema, at any depth. */
function fieldNames(schema: unknown, out = new Set<string>()): Set<string> {
  if (Array.isArray(schema)) for (const s of schema) fieldNames(s, out);
  else if (schema && typeof schema === 'object') {
    const o = schema as Record<string, unknown>;
    if (o.properties && typeof o.properties === 'object')
      for (const k of Object.keys(o.properties)) out.add(k);
    for (const v of Object.values(o)) fieldNames(v, out);
  }
  return out;
}

describe('docs/api.md', () => {
  it('documents every route the server registers, and no route it does not', async () => {
    const routes = serverRoutes();
    const doc = await documented();
    expect(routes.size).toBeGreaterThan(10);
    const missing = [...routes].filter((r) => !doc.routes.has(r) && !doc.pending.has(r));
    expect(missing, 'routes missing from docs/api.md').toEqual([]);
    const stale = [...doc.routes].filter((r) => !routes.has(r));
    expect(stale, 'documented routes the server does not have').toEqual([]);
    const landed = [...doc.pending].filter((r) => routes.has(r));
    expect(landed, 'routes marked "(pending merge" that now exist: drop the marker').toEqual([]);
  });

  it.each([
    ['run spec (POST /api/v1/runs)', runSpecSchema],
    ['token body (POST /api/v1/agents/tokens)', tokenBodySchema],
  ])('names every field of the %s schema', async (_name, schema) => {
    const { text } = await documented();
    const json = z.toJSONSchema(schema as z.ZodType, { io: 'input', unrepresentable: 'any' });
    const fields = [...fieldNames(json)];
    expect(fields.length).toBeGreaterThan(2);
    const missing = fields.filter((f) => !new RegExp(`\`[^\`]*\\b${f}\\b[^\`]*\``).test(text));
    expect(missing).toEqual([]);
  });

  it('names every field of the job view', async () => {
    const { text } = await documented();
    const row = new Proxy({}, { get: () => null });
    const fields = Object.keys(jobView(row as never));
    expect(fields.length).toBeGreaterThan(10);
    expect(fields.filter((f) => !new RegExp(`\`${f}\``).test(text))).toEqual([]);
  });
});
