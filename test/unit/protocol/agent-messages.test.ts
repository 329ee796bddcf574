import { describe, expect, it } from 'vitest';
import { LIMITS } from '../../../src/protocol/limits.js';
import { agentMessageSchema, registerSchema } from '../../../src/server/agent-messages.js';

const finished = { type: 'job.finished', jobId: 'j-1', result: 'failed' };

describe('the orchestrator checks what agents send', () => {
  it.each([-2147483648, 0, 255, 2147483647, null])('accepts exit code %s', (exitCode) => {
    expect(agentMessageSchema.safeParse({ ...finished, exitCode }).success).toBe(true);
  });

  it.each([2147483648, -2147483649, 99_999_999_999, 1.5, Infinity, '1'])(
    'refuses exit code %s',
    (exitCode) => {
      const res = agentMessageSchema.safeParse({ ...finished, exitCode });
      expect(res.success).toBe(false);
      expect(res.error?.issues[0]?.path).toEqual(['exitCode']);
    },
  );

  it('replaces NUL and lone surrogates in stored text', () => {
    const res = agentMessageSchema.parse({ ...finished, exitCode: 1, message: 'a\u0000b\ud800c\udc00' });
    expect(res).toMatchObject({ message: 'a\ufffdb\ufffdc\ufffd' });
    // A proper pair is kept.
    expect(agentMessageSchema.parse({ ...finished, exitCode: 1, message: '\ud83d\ude00' })).toMatchObject({
      message: '😀',
    });
  });

  it('a register at every field limit still fits in the bytes allowed before registration', () => {
    const labels = Array.from({ length: LIMITS.registerLabels }, (_, i) =>
      `l${i}-`.padEnd(Math.floor(LIMITS.registerLabelChars / LIMITS.registerLabels), 'x'),
    );
    const msg = {
      type: 'register',
      protocol: 1,
      agentId: 'a'.repeat(LIMITS.idChars),
      token: 't'.repeat(LIMITS.tokenChars),
      labels,
      version: 'v'.repeat(100),
      hostname: 'h'.repeat(255),
      activeJobId: 'j'.repeat(LIMITS.idChars),
      jobsDone: 2147483647,
    };
    expect(registerSchema.safeParse(msg).success).toBe(true);
    expect(Buffer.byteLength(JSON.stringify(msg)) + 14).toBeLessThan(LIMITS.preAuthBytes);
    expect(registerSchema.safeParse({ ...msg, labels: [...labels, 'one-more'] }).success).toBe(false);
  });

  it('refuses labels with commas or control characters, and ids outside the id alphabet', () => {
    const base = { type: 'register', agentId: 'a', token: 't', labels: ['x'] };
    expect(registerSchema.safeParse(base).success).toBe(true);
    expect(registerSchema.safeParse({ ...base, labels: ['a,b'] }).success).toBe(false);
    expect(registerSchema.safeParse({ ...base, labels: ['a\u0000'] }).success).toBe(false);
    expect(registerSchema.safeParse({ ...base, agentId: 'a b' }).success).toBe(false);
  });
});
