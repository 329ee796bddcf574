/**
 * `npm run lint` uses type information: a promise left unawaited in src/ fails it. The planted file
 * lives in src/ for the length of one lint call, so the project's own config and tsconfig judge it.
 */
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../../..');

async function lintPlanted(body: string): Promise<string[]> {
  const file = join(ROOT, 'src', `lint-probe-${randomBytes(4).toString('hex')}.ts`);
  await writeFile(file, body);
  try {
    const eslint = new ESLint({ cwd: ROOT });
    const [result] = await eslint.lintFiles([file]);
    return (result?.messages ?? []).map((m) => `${m.ruleId ?? 'fatal'}: ${m.message}`);
  } finally {
    await rm(file, { force: true });
  }
}

const WRITE = 'async function write(): Promise<void> {\n  throw new Error("disk full");\n}\n';

describe('type-aware lint', () => {
  it('fails on a promise that is neither awaited nor handled', { timeout: 120_000 }, async () => {
    const found = await lintPlanted(`${WRITE}export function save(): void {\n  write();\n}\n`);
    expect(found.some((m) => m.startsWith('@typescript-eslint/no-floating-promises'))).toBe(true);
  });

  it('fails on an async callback where a void one is expected', { timeout: 120_000 }, async () => {
    const found = await lintPlanted(
      `${WRITE}export function every(): void {\n  setInterval(async () => {\n    await write();\n  }, 1000);\n}\n`,
    );
    expect(found.some((m) => m.startsWith('@typescript-eslint/no-misused-promises'))).toBe(true);
  });

  it('passes the same code once the promise is awaited', { timeout: 120_000 }, async () => {
    const found = await lintPlanted(
      `${WRITE}export async function save(): Promise<void> {\n  await write();\n}\n`,
    );
    expect(found).toEqual([]);
  });
});
