import { access, constants, stat } from 'node:fs/promises';

/** Why a binaryPath cannot be run, or undefined when it can (a directory passes an X_OK check). */
export async function binaryProblem(path: string): Promise<string | undefined> {
  try {
    if ((await stat(path)).isDirectory()) return `${path} is a directory, not an executable file`;
    await access(path, constants.X_OK);
    return undefined;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT'
      ? `${path} does not exist`
      : `${path} is not an executable file`;
  }
}
