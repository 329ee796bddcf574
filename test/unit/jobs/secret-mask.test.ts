/**
 * The masker over job output as the agent hands it on: a step's writes, split anywhere, joined into
 * lines by the agent's line reader, then masked line by line. No split lets a secret through.
 */
import { PassThrough } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { maskLine, maskPatterns, SECRET_MASK, secretValues } from '../../../src/jobs/secret-mask.js';
import { parseRunSpec } from '../../../src/jobs/run-spec.js';
import { onLines } from '../../../src/util/lines.js';

/** Feed the chunks through the agent's real line reader and mask each line it gives. */
async function throughAgent(chunks: string[], patterns: string[]): Promise<string[]> {
  const stream = new PassThrough();
  const out: string[] = [];
  onLines(stream, (l) => out.push(maskLine(l, patterns)));
  const ended = new Promise((r) => stream.on('end', r));
  for (const c of chunks) stream.write(c);
  stream.end();
  await ended;
  return out;
}

/** Cut a text at the given offsets (sorted, deduplicated, inside the text). */
function splitAt(text: string, cuts: number[]): string[] {
  const at = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
  const parts: string[] = [];
  let from = 0;
  for (const c of at) {
    parts.push(text.slice(from, c));
    from = c;
  }
  parts.push(text.slice(from));
  return parts.filter(Boolean);
}

const secretChars = fc.constantFrom(...'abcXYZ019-_=+/.:@'.split(''));
const fillerChars = fc.constantFrom(...'abc XYZ019\n-_=+/.:@#'.split(''));

describe('secret masking', () => {
  it('property: however the output is split into writes, no secret reaches a line, and the lines are those of the whole text masked', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.string({ unit: secretChars, minLength: 4, maxLength: 24 }), {
          minLength: 1,
          maxLength: 3,
        }),
        fc.array(fc.tuple(fc.string({ unit: fillerChars, maxLength: 30 }), fc.nat({ max: 3 })), {
          minLength: 1,
          maxLength: 8,
        }),
        fc.array(fc.nat({ max: 10_000 }), { maxLength: 20 }),
        async (secrets, pieces, cuts) => {
          // Filler, then (sometimes) one of the secrets, as a step would print them.
          const text = pieces.map(([f, k]) => f + (k < secrets.length ? secrets[k]! : '')).join('');
          const patterns = maskPatterns(secrets);
          const lines = await throughAgent(splitAt(text, cuts), patterns);
          for (const l of lines) for (const s of secrets) expect(l).not.toContain(s);
          const whole = text.split('\n');
          if (whole.at(-1) === '') whole.pop();
          expect(lines).toEqual(whole.map((l) => maskLine(l, patterns)));
          // Output that holds no secret is left as it was.
          for (const [i, l] of whole.entries())
            if (!patterns.some((p) => l.includes(p))) expect(lines[i]).toBe(l);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a value printed in two writes, its base64 form and each longer line of a multi-line value are masked', async () => {
    const key = 'hunter2-deploy-key';
    const pem = 'BEGIN KEY\nQUJDREVGR0hJSktM\nEND KEY';
    const patterns = maskPatterns([key, pem]);
    const lines = await throughAgent(
      [
        `token=${key.slice(0, 7)}`,
        `${key.slice(7)} ok\n`,
        `${Buffer.from(key).toString('base64')}\n`,
        `${pem}\n`,
      ],
      patterns,
    );
    expect(lines).toEqual([`token=${SECRET_MASK} ok`, SECRET_MASK, SECRET_MASK, SECRET_MASK, SECRET_MASK]);
  });

  it('a longer secret that contains a shorter one is masked whole', () => {
    expect(maskLine('x=abcdefgh y=abcd', maskPatterns(['abcd', 'abcdefgh']))).toBe(
      `x=${SECRET_MASK} y=${SECRET_MASK}`,
    );
  });
});

describe('run files: secrets', () => {
  const job = (extra: Record<string, unknown>) => ({
    jobs: {
      build: { runsOn: ['linux'], steps: [{ run: 'true', env: { STEP_KEY: 'from-step' } }], ...extra },
    },
  });

  it('names env variables of the job or a step; their values are what is masked', () => {
    const res = parseRunSpec(job({ env: { TOKEN: 't0ken-value' }, secrets: ['TOKEN', 'STEP_KEY'] }));
    expect(res.ok).toBe(true);
    if (!res.ok) return;
    expect(secretValues(res.value.jobs.build!).sort()).toEqual(['from-step', 't0ken-value']);
  });

  it('a name set nowhere is refused, naming the field and the fix', () => {
    const res = parseRunSpec(job({ secrets: ['NOPE'] }));
    expect(res).toEqual({
      ok: false,
      problems: [
        `jobs.build.secrets[0]: "NOPE" is not set in the job's env or any step's env; set it there or remove it from secrets`,
      ],
    });
  });

  it('a name that is not a variable name is refused', () => {
    const res = parseRunSpec(job({ secrets: ['not a name'] }));
    expect(res.ok).toBe(false);
    if (!res.ok) expect(res.problems[0]).toMatch(/^jobs\.build\.secrets\[0\]: /);
  });
});
