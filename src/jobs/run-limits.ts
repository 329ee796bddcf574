/**
 * Sizes a job must keep to be runnable at all, checked when it is submitted: a job the agent could
 * never start (a command larger than the kernel takes as one argument, an environment larger than
 * it takes in all) or that no machine could hold is refused with the field named, instead of being
 * queued and failing later, or waiting forever.
 */
import type { z } from 'zod';

/**
 * Linux refuses one argument or environment string longer than 32 pages (128 KiB, with its NUL)
 * with E2BIG; a step's command is one argument to the shell, each variable one `NAME=value` string.
 */
export const MAX_ARG_BYTES = 128 * 1024 - 1;
/**
 * All of a step's strings together (its command, the job's and the step's environment). The kernel
 * allows more (a quarter of the stack limit, often 2 MiB), but the agent adds its own variables and
 * the job travels in one protocol frame: 1 MiB leaves room for both.
 */
export const MAX_STEP_TOTAL_BYTES = 1024 * 1024;
/** The most memory a job may ask for: 1 PiB. More is a typo, and overflows the store's counters. */
export const MAX_MEMORY_BYTES = 2 ** 50;

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

type Env = Record<string, string> | undefined;
interface SizedJob {
  env?: Env;
  steps: { run: string; env?: Env }[];
}

function envBytes(env: Env): number {
  let n = 0;
  for (const [k, v] of Object.entries(env ?? {})) n += bytes(k) + 1 + bytes(v) + 1;
  return n;
}

function checkEnv(env: Env, path: (string | number)[], ctx: z.RefinementCtx): void {
  for (const [k, v] of Object.entries(env ?? {})) {
    const size = bytes(k) + 1 + bytes(v);
    if (size > MAX_ARG_BYTES)
      ctx.addIssue({
        code: 'custom',
        path: [...path, k],
        message: `${size} bytes as NAME=value; one variable may hold at most ${MAX_ARG_BYTES} (the kernel refuses more with E2BIG): pass large data as a file`,
      });
  }
}

/** A superRefine for a job: each string the agent execs, and each step's total. */
export function checkJobSizes(job: SizedJob, ctx: z.RefinementCtx): void {
  checkEnv(job.env, ['env'], ctx);
  const jobEnv = envBytes(job.env);
  job.steps.forEach((step, i) => {
    const run = bytes(step.run);
    if (run > MAX_ARG_BYTES)
      ctx.addIssue({
        code: 'custom',
        path: ['steps', i, 'run'],
        message: `${run} bytes; a step's command may hold at most ${MAX_ARG_BYTES} (the kernel refuses more with E2BIG): put the script in a file and run that`,
      });
    checkEnv(step.env, ['steps', i, 'env'], ctx);
    const total = run + jobEnv + envBytes(step.env);
    if (total > MAX_STEP_TOTAL_BYTES)
      ctx.addIssue({
        code: 'custom',
        path: ['steps', i],
        message: `its command and environment (the job's and its own) are ${total} bytes; at most ${MAX_STEP_TOTAL_BYTES} in all`,
      });
  });
}
