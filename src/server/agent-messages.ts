import { z } from 'zod';

/** Server-side validation of what agents send; the agent itself only uses the plain types. */
const id = z.string().min(1).max(200);

export const registerSchema = z.object({
  type: z.literal('register'),
  protocol: z.number().int().optional(),
  agentId: id.regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'an agent id (letters, digits, ".", "_", "-")'),
  token: z.string().min(1).max(500),
  labels: z.array(z.string().min(1).max(200)).max(500),
  version: z.string().max(100).optional(),
  hostname: z.string().max(255).optional(),
  activeJobId: id.optional(),
  jobsDone: z.number().int().min(0).optional(),
});

export const agentMessageSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('heartbeat') }),
  z.object({ type: z.literal('job.started'), jobId: id }),
  z.object({
    type: z.literal('step.started'),
    jobId: id,
    idx: z.number().int().min(0),
    name: z.string().max(200),
  }),
  z.object({
    type: z.literal('log'),
    jobId: id,
    idx: z.number().int().min(0).nullable(),
    stream: z.enum(['stdout', 'stderr', 'system']),
    lines: z.array(z.string().max(1_000_000)).max(5000),
  }),
  z.object({
    type: z.literal('step.finished'),
    jobId: id,
    idx: z.number().int().min(0),
    exitCode: z.number().int().nullable(),
    timedOut: z.boolean(),
    durationMs: z.number().min(0),
  }),
  z.object({
    type: z.literal('job.finished'),
    jobId: id,
    result: z.enum(['succeeded', 'failed', 'cancelled', 'timed-out']),
    exitCode: z.number().int().nullable(),
    message: z.string().max(10_000).optional(),
  }),
  z.object({ type: z.literal('job.rejected'), jobId: id, reason: z.string().max(1000) }),
  z.object({ type: z.literal('agent.draining') }),
]);

export type ValidRegister = z.output<typeof registerSchema>;
export type ValidAgentMessage = z.output<typeof agentMessageSchema>;

export function describeIssues(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`).join('; ');
}
