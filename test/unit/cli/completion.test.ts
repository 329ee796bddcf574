import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { completionScript } from '../../../src/cli/admin/completion.js';
import { buildAdminProgram } from '../../../src/cli/admin/program.js';
import { UsageError } from '../../../src/util/errors.js';

/** What bash offers for a command line whose last word is being typed, using the generated script. */
function bashComplete(words: string[]): string[] {
  const script = completionScript(buildAdminProgram(), 'bash');
  const quoted = words.map((w) => `'${w}'`).join(' ');
  const res = spawnSync(
    'bash',
    [
      '-c',
      `${script}\nCOMP_WORDS=(${quoted}); COMP_CWORD=${words.length - 1}; _kici_admin; printf '%s\\n' "\${COMPREPLY[@]}"`,
    ],
    { encoding: 'utf8' },
  );
  expect(res.stderr).toBe('');
  return res.stdout.split('\n').filter(Boolean).sort();
}

describe('kici-admin completion', () => {
  it('bash completes commands at every level, from the program tree', () => {
    expect(bashComplete(['kici-admin', 'sc'])).toEqual(['scaler']);
    expect(bashComplete(['kici-admin', 'job', 'l'])).toEqual(['list', 'logs']);
    expect(bashComplete(['kici-admin', 'agent', 'token', ''])).toEqual([
      'create',
      'list',
      'revoke',
      'rotate',
    ]);
    // Global options and their values do not lose the place.
    expect(bashComplete(['kici-admin', '--server', 'http://x', 'agent', 'dr'])).toEqual(['drain']);
  });

  it("bash completes a command's own options and the program's", () => {
    const opts = bashComplete(['kici-admin', 'job', 'list', '--']);
    expect(opts).toEqual(expect.arrayContaining(['--state', '--limit', '--json', '--server']));
    expect(bashComplete(['kici-admin', 'job', 'submit', '--fo'])).toEqual(['--follow']);
  });

  it('every command of the program is in each script', () => {
    const program = buildAdminProgram();
    const names = (c: typeof program): string[] => c.commands.flatMap((s) => [s.name(), ...names(s)]);
    for (const shell of ['bash', 'zsh', 'fish'])
      for (const n of names(program)) expect(completionScript(program, shell)).toContain(n);
  });

  it('an unknown shell is a usage error naming the choices', () => {
    expect(() => completionScript(buildAdminProgram(), 'tcsh')).toThrow(UsageError);
    expect(() => completionScript(buildAdminProgram(), 'tcsh')).toThrow(/bash, zsh, fish/);
  });
});
