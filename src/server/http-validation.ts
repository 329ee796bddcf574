import type { Context } from 'hono';
import { z } from 'zod';
import { capProblems, formatIssuePath } from '../jobs/run-spec.js';
import { findUnsafeText, quote } from '../jobs/safe-text.js';
import { LIMITS } from '../protocol/limits.js';

/** Room left in a register message for the labels an agent reports about its own host. */
const MAX_TOKEN_LABELS = LIMITS.registerLabels - 8;

/**
 * Input checks of the admin API. Every bad input is a 400 that names the field; nothing a client
 * sends may reach the store unchecked and come back as a 500.
 */

/** The largest request body the API reads (8 MiB): a 10,000-job run file fits with room to spare. */
export const MAX_BODY_BYTES = 8 * 1024 * 1024;

/** Longest agent token lifetime: ten years. Longer ones overflow dates and mean "forever" anyway. */
export const MAX_TOKEN_TTL_SECONDS = 10 * 365 * 24 * 3600;

/** A static agent token's lifetime when none is given: 90 days (`null` asks for none, explicitly). */
export const DEFAULT_AGENT_TOKEN_TTL_SECONDS = 90 * 24 * 3600;

/** Static agent tokens that expire within this are flagged in `agent token list` and counted in a gauge. */
export const EXPIRING_SOON_MS = 14 * 24 * 3600 * 1000;

/** Ids minted by the server (`j-…`, `r-…`, agent ids) use only these characters. */
const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export function bad(c: Context, problems: string[]) {
  return c.json({ error: 'invalid request', problems: capProblems(problems) }, 400);
}

/** A 404 that names what was looked for, shared by every route that reads one thing by its id. */
export function notFound(c: Context, what: string, id: string) {
  return c.json({ error: 'not found', problems: [`${what} ${id} does not exist`] }, 404);
}

/** Why an id from a path or query cannot be an id, or undefined when it can. */
export function idProblem(field: string, value: string): string | undefined {
  if (ID_PATTERN.test(value)) return undefined;
  return `${field}: ${quote(value, 40)} is not an id (letters, digits, ".", "_", "-"; at most 128)`;
}

/** `?after=`: a log line id, which must fit a double exactly. */
export function afterProblem(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (/^\d{1,16}$/.test(value) && Number.isSafeInteger(Number(value))) return undefined;
  return `after: a log line id (a whole number from 0 to ${Number.MAX_SAFE_INTEGER})`;
}

/** Read a JSON body; the problems say what is wrong with it, or the value is returned. */
export async function readJsonBody(
  c: Context,
): Promise<{ ok: true; value: unknown } | { ok: false; problems: string[] }> {
  let body: unknown;
  try {
    body = await c.req.json();
  } catch {
    return { ok: false, problems: ['(body): must be a JSON object'] };
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    return { ok: false, problems: ['(body): must be a JSON object'] };
  const unsafe = findUnsafeText(body);
  return unsafe.length ? { ok: false, problems: unsafe } : { ok: true, value: body };
}

/**
 * A token label: one word as agents report them in KICI_LABELS (comma-separated), so a label
 * may not hold a comma, whitespace or nothing at all.
 */
const tokenLabelSchema = z
  .string()
  .min(1, 'a label must not be empty')
  .max(LIMITS.labelChars, `at most ${LIMITS.labelChars} characters`)
  .regex(/^[^\s,]+$/, 'a label is one word: no commas, spaces or other whitespace');

export const tokenBodySchema = z.strictObject({
  labels: z
    .array(tokenLabelSchema)
    .min(1, 'at least one label')
    // An agent must be able to register with every label its token grants.
    .max(MAX_TOKEN_LABELS, `at most ${MAX_TOKEN_LABELS} labels`)
    .refine(
      (labels) => labels.join('').length <= LIMITS.registerLabelChars - 512,
      `at most ${LIMITS.registerLabelChars - 512} characters of labels in all`,
    ),
  agentId: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'an agent id (letters, digits, ".", "_", "-")')
    .refine(
      (v) => !/^scaler-/i.test(v),
      'the "scaler-" prefix (in any case) is reserved for scaler-spawned agents',
    )
    .optional(),
  ttlSeconds: z
    .number()
    .int()
    .positive()
    .max(MAX_TOKEN_TTL_SECONDS, `at most ${MAX_TOKEN_TTL_SECONDS} (10 years)`)
    .nullable()
    .optional(),
});

export function describeIssues(err: z.ZodError): string[] {
  return err.issues.map((i) => {
    const message =
      i.code === 'unrecognized_keys'
        ? `unknown field${i.keys.length > 1 ? 's' : ''} ${i.keys
            .slice(0, 5)
            .map((k) => quote(k))
            .join(', ')}`
        : i.message;
    return `${i.path.length ? formatIssuePath(i.path) : '(body)'}: ${message}`;
  });
}
