import { z } from 'zod';
import { isMemoryString, parseMemoryString } from '../config/memory.js';
import { LIMITS } from '../protocol/limits.js';
import { imageAuthSchema } from './image-auth.js';
import { checkJobSizes, MAX_MEMORY_BYTES } from './run-limits.js';
import { dropShadowedRequired, runSpecIssueMessage } from './run-spec-messages.js';
import { clip, findUnsafeText } from './safe-text.js';

/**
 * The longest job or step timeout: 30 days. Anything longer is almost surely a typo, and Node's
 * timers cannot hold more than about 24.8 days in one piece anyway.
 */
export const MAX_TIMEOUT_SECONDS = 30 * 24 * 3600;
const timeoutSchema = z
  .number()
  .int()
  .positive()
  .max(MAX_TIMEOUT_SECONDS, `at most ${MAX_TIMEOUT_SECONDS} (30 days)`);

/** At most this many problems are listed for one input; the rest are counted. */
export const MAX_PROBLEMS = 50;

/**
 * The run file (`kici-admin job submit run.yaml`) and the body of `POST /api/v1/runs`:
 * one schema, so the CLI and the API refuse the same things with the same words.
 */
const envNameSchema = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name (letters, digits, _)');
const envSchema = z.record(envNameSchema, z.string());

const MEMORY_PATTERN = /^\d+(\.\d+)?\s?[kmgKMG]$/;
const MEMORY_MESSAGE = 'a memory size like "512m", "2g" or "1024k" (binary units)';
const memorySchema = z
  .string()
  .regex(MEMORY_PATTERN, MEMORY_MESSAGE)
  // A number too large for a double would pass the pattern and then fail when the job is billed.
  .refine((v) => !MEMORY_PATTERN.test(v) || isMemoryString(v), MEMORY_MESSAGE)
  // No machine has more: a request above this could never be met and would wait forever.
  .refine(
    (v) => !isMemoryString(v) || parseMemoryString(v) <= MAX_MEMORY_BYTES,
    `at most ${MAX_MEMORY_BYTES / 1024 ** 3}g (1 PiB); no machine could meet more`,
  );

const resourceSpecSchema = z.strictObject({
  cpus: z.number().positive().max(256).optional(),
  memory: memorySchema.optional(),
});

export const jobResourcesSchema = z.strictObject({
  requests: resourceSpecSchema.optional(),
  limits: resourceSpecSchema.optional(),
});

export const stepSpecSchema = z.strictObject({
  name: z.string().min(1).max(200).optional(),
  run: z.string().min(1, 'a shell command'),
  env: envSchema.optional(),
  timeoutSeconds: timeoutSchema.optional(),
});

/** Dispatch priority: higher first within a label set. Bounded so a typo cannot outrank everyone forever. */
export const MAX_PRIORITY = 1000;
const prioritySchema = z
  .number()
  .int('a whole number')
  .min(-MAX_PRIORITY, `from ${-MAX_PRIORITY} to ${MAX_PRIORITY}`)
  .max(MAX_PRIORITY, `from ${-MAX_PRIORITY} to ${MAX_PRIORITY}`);

/** The team a run belongs to, for fair share across owners. */
const ownerSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/, 'a team name (letters, digits, "_", "-", "."; at most 64)');

export const JOB_ROLES = ['execution', 'build', 'init'] as const;

/** An agent registers with at most this many labels, so a job asking for more could never match. */
const MAX_RUNS_ON = LIMITS.registerLabels;
const label = z.string().min(1).max(LIMITS.labelChars, `a label has at most ${LIMITS.labelChars} characters`);

export const jobSpecSchema = z
  .strictObject({
    runsOn: z
      .union([label, z.array(label).min(1)], {
        error: (iss) =>
          `${iss.input === undefined ? 'required: ' : ''}a label or a list of labels, like [linux, small]`,
      })
      .transform((v) => (typeof v === 'string' ? [v] : v))
      .refine((v) => v.length <= MAX_RUNS_ON, `at most ${MAX_RUNS_ON} labels (an agent has no more)`),
    steps: z.array(stepSpecSchema).min(1, 'at least one step'),
    env: envSchema.optional(),
    resources: jobResourcesSchema.optional(),
    container: z
      .strictObject({
        image: z.string().min(1),
        /** Registry credentials for pulling `image`, by secret-store reference. */
        auth: imageAuthSchema.optional(),
      })
      .optional(),
    timeoutSeconds: timeoutSchema.optional(),
    role: z.enum(JOB_ROLES).default('execution'),
    /** Never run on an agent (or scaler label set) carrying any of these labels. */
    excludeLabels: z.array(z.string().min(1)).optional(),
    /** Names of `env` variables (the job's or a step's) whose values are masked wherever output is shown. */
    secrets: z.array(envNameSchema).max(100, 'at most 100 secrets in one job').optional(),
    /** Overrides the run's priority for this job. */
    priority: prioritySchema.optional(),
  })
  .superRefine(checkJobSizes)
  .superRefine(checkSecretNames);

/** A name under `secrets` must be set somewhere in the job, or nothing would be masked for it. */
function checkSecretNames(
  job: {
    secrets?: string[] | undefined;
    env?: Record<string, string> | undefined;
    steps: { env?: Record<string, string> | undefined }[];
  },
  ctx: z.RefinementCtx,
): void {
  for (const [i, name] of (job.secrets ?? []).entries()) {
    if (job.env?.[name] !== undefined || job.steps.some((s) => s.env?.[name] !== undefined)) continue;
    ctx.addIssue({
      code: 'custom',
      path: ['secrets', i],
      message: `"${clip(name)}" is not set in the job's env or any step's env; set it there or remove it from secrets`,
    });
  }
}

const jobNameSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$/, 'a job name (letters, digits, "_", "-", "."; at most 100)');

export const runSpecSchema = z.strictObject({
  name: z.string().min(1).max(200).optional(),
  /** The default priority of the run's jobs (0 when unset). */
  priority: prioritySchema.optional(),
  owner: ownerSchema.optional(),
  jobs: z
    .record(jobNameSchema, jobSpecSchema)
    .refine((jobs) => Object.keys(jobs).length > 0, 'at least one job')
    .refine((jobs) => Object.keys(jobs).length <= 10_000, 'at most 10000 jobs in one run'),
});

export type RunSpec = z.output<typeof runSpecSchema>;
export type JobSpec = z.output<typeof jobSpecSchema>;
export type StepSpec = z.output<typeof stepSpecSchema>;
export type JobResources = z.output<typeof jobResourcesSchema>;

/**
 * Format a Zod issue path the way operators read YAML: `jobs.build.steps[0].run`. Keys come from
 * the sender, so each is clipped: a 1 MB job name is never echoed in full.
 */
export function formatIssuePath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else {
      const name = clip(String(part));
      out += out ? `.${name}` : name;
    }
  }
  return out || '(root)';
}

export function describeRunSpecIssues(err: z.ZodError): string[] {
  return capProblems(
    dropShadowedRequired(err.issues).map((i) => `${formatIssuePath(i.path)}: ${issueMessage(i)}`),
  );
}

/** Keep a problem list readable: the first MAX_PROBLEMS, then a count of the rest. */
export function capProblems(problems: string[]): string[] {
  if (problems.length <= MAX_PROBLEMS) return problems;
  return [...problems.slice(0, MAX_PROBLEMS), `… and ${problems.length - MAX_PROBLEMS} more problems`];
}

/** A bad record key (job name, env name) only says "Invalid key in record"; its own schema says why. */
function issueMessage(i: z.core.$ZodIssue): string {
  if (i.code === 'invalid_key' && i.issues.length > 0) return i.issues.map((k) => k.message).join('; ');
  return clip(i.message, 300);
}

/** The config's plain-language messages (with "did you mean"), for the API and the run file alike. */
export const RUN_SPEC_PARSE_PARAMS = { error: runSpecIssueMessage } as const;

export type ParseResult<T> = { ok: true; value: T } | { ok: false; problems: string[] };

export function parseRunSpec(input: unknown): ParseResult<RunSpec> {
  const unsafe = findUnsafeText(input);
  if (unsafe.length) return { ok: false, problems: unsafe };
  const res = runSpecSchema.safeParse(input, RUN_SPEC_PARSE_PARAMS);
  if (res.success) return { ok: true, value: res.data };
  return { ok: false, problems: describeRunSpecIssues(res.error) };
}
