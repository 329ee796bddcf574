import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

/**
 * Checks a request against Firecracker's published API description (Swagger 2.0 YAML): the path
 * must be one of its paths, the method one it declares, and the body must fit the declared schema
 * (required fields, types, enums; fields the schema does not declare are refused, as Firecracker's
 * own parser refuses them, unless the schema says additionalProperties: true).
 */
export const FIRECRACKER_API_YAML =
  process.env.KICI_FIRECRACKER_API_YAML ??
  fileURLToPath(new URL('../fixtures/firecracker/firecracker-api.yaml', import.meta.url));

type Schema = {
  $ref?: string;
  type?: string;
  required?: string[];
  properties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  enum?: unknown[];
  items?: Schema;
};
type Param = { name: string; in: string; required?: boolean; schema?: Schema; type?: string };
type Operation = { parameters?: Param[] };
interface ApiDoc {
  paths: Record<string, Record<string, Operation>>;
  definitions: Record<string, Schema>;
}

export function loadFirecrackerApi(path = FIRECRACKER_API_YAML): ApiDoc {
  return parse(readFileSync(path, 'utf8')) as ApiDoc;
}

function matchPath(
  doc: ApiDoc,
  url: string,
): { template: string; params: Record<string, string> } | undefined {
  for (const template of Object.keys(doc.paths)) {
    const names: string[] = [];
    const re = new RegExp(
      '^' +
        template.replace(/\{([^}]+)\}/g, (_, n: string) => {
          names.push(n);
          return '([^/]+)';
        }) +
        '$',
    );
    const m = re.exec(url);
    if (m)
      return {
        template,
        params: Object.fromEntries(names.map((n, i) => [n, decodeURIComponent(m[i + 1]!)])),
      };
  }
  return undefined;
}

function resolve(doc: ApiDoc, s: Schema): Schema {
  let cur = s;
  while (cur.$ref) {
    const name = cur.$ref.replace('#/definitions/', '');
    const next = doc.definitions[name];
    if (!next) throw new Error(`the API document has no definition ${name}`);
    cur = next;
  }
  return cur;
}

function typeOk(type: string, v: unknown): boolean {
  switch (type) {
    case 'object':
      return typeof v === 'object' && v !== null && !Array.isArray(v);
    case 'array':
      return Array.isArray(v);
    case 'string':
      return typeof v === 'string';
    case 'boolean':
      return typeof v === 'boolean';
    case 'integer':
      return Number.isInteger(v);
    case 'number':
      return typeof v === 'number' && Number.isFinite(v);
    default:
      return true;
  }
}

function validate(doc: ApiDoc, schema: Schema, value: unknown, at: string, errors: string[]): void {
  const s = resolve(doc, schema);
  const type = s.type ?? (s.properties ? 'object' : undefined);
  if (type && !typeOk(type, value)) {
    errors.push(`${at}: expected ${type}, got ${JSON.stringify(value)}`);
    return;
  }
  if (s.enum && !s.enum.includes(value))
    errors.push(`${at}: ${JSON.stringify(value)} is not one of ${s.enum.join(', ')}`);
  if (type === 'array' && s.items)
    (value as unknown[]).forEach((v, i) => validate(doc, s.items!, v, `${at}[${i}]`, errors));
  if (type !== 'object') return;
  const obj = value as Record<string, unknown>;
  for (const r of s.required ?? []) if (!(r in obj)) errors.push(`${at}.${r}: required`);
  for (const [k, v] of Object.entries(obj)) {
    const prop = s.properties?.[k];
    if (prop) validate(doc, prop, v, `${at}.${k}`, errors);
    else if (typeof s.additionalProperties === 'object')
      validate(doc, s.additionalProperties, v, `${at}.${k}`, errors);
    else if (s.additionalProperties !== true) errors.push(`${at}.${k}: not a field of this request`);
  }
}

/** Every reason the request is not allowed by the document; empty when it is. */
export function checkRequest(doc: ApiDoc, method: string, url: string, body: unknown): string[] {
  const m = matchPath(doc, url.split('?')[0]!);
  if (!m) return [`${url}: no such path in the Firecracker API`];
  const op = doc.paths[m.template]![method.toLowerCase()];
  if (!op) return [`${method} ${m.template}: method not allowed`];
  const errors: string[] = [];
  const bodyParam = op.parameters?.find((p) => p.in === 'body');
  if (!bodyParam) {
    if (body !== undefined) errors.push(`${method} ${m.template}: takes no body`);
    return errors;
  }
  if (body === undefined) {
    if (bodyParam.required) errors.push(`${method} ${m.template}: body required`);
    return errors;
  }
  if (bodyParam.schema) validate(doc, bodyParam.schema, body, 'body', errors);
  // Firecracker also insists that an id in the path and in the body agree.
  for (const [name, v] of Object.entries(m.params)) {
    const inBody = (body as Record<string, unknown>)?.[name];
    if (inBody !== undefined && inBody !== v)
      errors.push(`body.${name}: "${String(inBody)}" differs from the path's "${v}"`);
  }
  return errors;
}
