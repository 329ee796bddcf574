import type { Logger } from '../../../util/logger.js';
import type { SpawnContext } from '../../types.js';
import { bootFailureOf, FileTail } from './log-tail.js';
import type { TrackedVm } from './tracked.js';
import { vmFiles } from './vm-dir.js';

/** Lines of console output kept per VM for spawn-failure messages and getLogCapture. */
export const TAIL_LINES = 50;

/**
 * Serial console and VMM log, line by line, into our log (logsSource firecracker-serial /
 * firecracker-vmm), the waiting job's timeline and the VM's tail. Boot-failure lines log as errors.
 */
export function startVmTails(
  log: Logger,
  t: TrackedVm,
  ctx: Pick<SpawnContext, 'onEvent'> | undefined,
): void {
  const files = vmFiles(t.dir);
  for (const [path, source] of [
    [files.serialLog, 'firecracker-serial'],
    [files.vmmLog, 'firecracker-vmm'],
  ] as const) {
    const l = log.child({ agentId: t.agent.id, logsSource: source });
    const tail = new FileTail(path, (line) => {
      t.tail.push(line);
      if (t.tail.length > TAIL_LINES) t.tail.shift();
      const failure = bootFailureOf(line);
      if (failure) l.error({ line, failure }, 'VM boot failure');
      else l.debug({ line }, 'vm output');
      ctx?.onEvent('agent.output', `[${source === 'firecracker-serial' ? 'console' : 'vmm'}] ${line}`);
    });
    tail.start();
    t.tails.push(tail);
  }
}

/** The VMM exited before the agent registered: say why on the waiting job, with the console tail. */
export function reportEarlyExit(log: Logger, ctx: SpawnContext, t: TrackedVm, code: number | null): void {
  if (t.registered || t.destroying) return;
  void Promise.all(t.tails.map((x) => x.stop())).then(() => {
    const failure = t.tail.map(bootFailureOf).find(Boolean) ?? 'unknown';
    const last = t.tail.slice(-10).join('\n');
    log.error({ agentId: t.agent.id, failure, code }, 'VM boot failed');
    ctx.onEvent(
      'scaler.failed',
      `VM exited (code ${code}, ${failure}) before its agent registered${last ? `\n---\n${last}` : ''}`,
    );
  });
}
