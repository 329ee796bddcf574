import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';

/**
 * Where the orchestrator keeps its state when no `--data-dir` / `KICI_DATA_DIR` is given: the system
 * place for root, the user's XDG state directory otherwise. Never the current directory, so the
 * state does not depend on where the command was started.
 */
export function defaultDataDir(
  env: NodeJS.ProcessEnv = process.env,
  uid: number | undefined = process.getuid?.(),
  home: string = homedir(),
): string {
  if (uid === 0) return '/var/lib/kici';
  const xdg = env.XDG_STATE_HOME;
  // The XDG spec says a relative value is invalid and must be ignored.
  const base = xdg && isAbsolute(xdg) ? xdg : join(home, '.local', 'state');
  return join(base, 'kici');
}

/** `--data-dir`, else `KICI_DATA_DIR`, else the default above. */
export function resolveDataDir(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return flag ?? (env.KICI_DATA_DIR || defaultDataDir(env));
}
