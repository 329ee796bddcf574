import { open, realpath } from 'node:fs/promises';
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path';
import { isConfinedJobPath } from '../../config/entry-schema.js';
import { UserError } from '../../util/errors.js';

/** A provisioning job template is a small YAML file; anything larger is not one. */
export const JOB_TARGET_MAX_BYTES = 256 * 1024;

/**
 * The template file of a `job:` target, read only if it really lies in the config directory (after
 * following symbolic links) and is no larger than JOB_TARGET_MAX_BYTES. Nothing of a refused file
 * is read, so its content can never show up in an error.
 */
export async function readJobTarget(
  configPath: string,
  file: string,
): Promise<{ path: string; text: string }> {
  const dir = dirname(configPath);
  if (!isConfinedJobPath(file))
    throw new UserError(
      `job:${file}: a job target must be a relative path inside the config directory ${dir} (no "..", not absolute)`,
    );
  const path = resolve(dir, file);
  let real: string;
  let realDir: string;
  try {
    [real, realDir] = await Promise.all([realpath(path), realpath(dir)]);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UserError(
      code === 'ENOENT'
        ? `job:${file}: ${path}: file not found`
        : `job:${file}: cannot open ${path}: ${code ?? 'error'}`,
    );
  }
  const rel = relative(realDir, real);
  if (rel === '' || rel.startsWith(`..${sep}`) || rel === '..' || isAbsolute(rel))
    throw new UserError(`job:${file}: ${path} leads outside the config directory ${dir} (a symbolic link?)`);
  const fh = await open(real, 'r');
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new UserError(`job:${file}: ${path} is not a regular file`);
    if (st.size > JOB_TARGET_MAX_BYTES)
      throw new UserError(
        `job:${file}: ${path} is ${st.size} bytes; a job target may be at most ${JOB_TARGET_MAX_BYTES}`,
      );
    // Read through the handle that was checked, at most one byte past the cap (the file may grow).
    const buf = Buffer.alloc(JOB_TARGET_MAX_BYTES + 1);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    if (bytesRead > JOB_TARGET_MAX_BYTES)
      throw new UserError(`job:${file}: ${path} is larger than ${JOB_TARGET_MAX_BYTES} bytes`);
    return { path, text: buf.subarray(0, bytesRead).toString('utf8') };
  } finally {
    await fh.close();
  }
}
