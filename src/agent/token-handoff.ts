import { closeSync, readFileSync, unlinkSync } from 'node:fs';
import { AgentConfigError } from './config.js';

/** The variables that name an agent's secrets; none of them stays in the agent's environment. */
export const SECRET_ENV = ['KICI_AGENT_TOKEN', 'KICI_SCALER_CLAIM_CODE', 'KICI_ADMIN_TOKEN'] as const;

/**
 * The agent's token, taken the way it was handed over, and the environment left without it.
 *
 * The token must not be readable by the jobs the agent runs. A process's initial environment stays
 * readable in /proc/<pid>/environ for its whole life, whatever it later does to `process.env`, so
 * the backends that start agents never put the token there: they pass it on an inherited
 * descriptor (`KICI_AGENT_TOKEN_FD`), read to its end and closed here, or in a file
 * (`KICI_AGENT_TOKEN_FILE`), removed here right after it is read. `KICI_AGENT_TOKEN` itself still
 * works for an agent an operator starts by hand; it is removed from `process.env` so no step
 * inherits it.
 */
export function takeHandedToken(env: NodeJS.ProcessEnv): string | undefined {
  let token: string | undefined;
  const fd = env.KICI_AGENT_TOKEN_FD;
  const file = env.KICI_AGENT_TOKEN_FILE;
  if (fd !== undefined && fd !== '') {
    const n = Number(fd);
    if (!Number.isInteger(n) || n < 0)
      throw new AgentConfigError('KICI_AGENT_TOKEN_FD must be a descriptor number');
    try {
      token = readFileSync(n, 'utf8').trim();
    } catch (err) {
      throw new AgentConfigError(`cannot read the token from descriptor ${n}: ${(err as Error).message}`);
    } finally {
      try {
        closeSync(n);
      } catch {
        // already closed: nothing is left to hide
      }
    }
  } else if (file !== undefined && file !== '') {
    try {
      token = readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new AgentConfigError(`cannot read the token file ${file}: ${(err as Error).message}`);
    } finally {
      try {
        unlinkSync(file);
      } catch {
        // gone already, or not ours to remove: the read above is what mattered
      }
    }
  }
  token ||= env.KICI_AGENT_TOKEN || undefined;
  for (const k of [...SECRET_ENV, 'KICI_AGENT_TOKEN_FD', 'KICI_AGENT_TOKEN_FILE']) {
    if (k !== 'KICI_SCALER_CLAIM_CODE') delete env[k];
  }
  return token;
}
