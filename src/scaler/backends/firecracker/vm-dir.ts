import { mkdir, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CommandRunner } from './host-net.js';
import { procStartTime } from './vm-process.js';

/**
 * Each VM owns `<base>/firecracker/<agentId>/root/`: overlay, logs, pid file, its record. The
 * directory is the host-local proof a VM was started here, so a restarted orchestrator (or the disk
 * guard) can find, adopt or reap it without the database.
 */
export interface VmRecord {
  agentId: string;
  scalerName: string;
  labelSet: string[];
  ip: string;
  tap: string;
  startedAt: number;
}

const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export function vmDirFor(base: string, agentId: string): string {
  if (!SAFE_ID.test(agentId)) throw new Error(`agent id "${agentId}" cannot name a VM directory`);
  return join(base, 'firecracker', agentId, 'root');
}

export const vmFiles = (dir: string) => ({
  overlay: join(dir, 'overlay.ext4'),
  serialLog: join(dir, 'serial-console.log'),
  vmmLog: join(dir, 'vmm.log'),
  pid: join(dir, 'vmm.pid'),
  record: join(dir, 'vm.json'),
  apiSocket: join(dir, 'run', 'firecracker.socket'),
});

/** Create the directory, the sparse overlay (formatted ext4) and empty logs. */
export async function prepareVmDir(
  dir: string,
  overlayMib: number,
  run: CommandRunner,
  record: VmRecord,
): Promise<void> {
  const f = vmFiles(dir);
  await mkdir(join(dir, 'run'), { recursive: true, mode: 0o700 });
  // The record first: from here on a crash leaves something recovery can recognise.
  await writeFile(f.record, JSON.stringify(record), { mode: 0o600 });
  const fh = await open(f.overlay, 'w', 0o600);
  try {
    await fh.truncate(overlayMib * 1024 * 1024);
  } finally {
    await fh.close();
  }
  await run('mkfs.ext4', ['-qF', '-E', 'lazy_itable_init=1,lazy_journal_init=1', f.overlay]);
  await writeFile(f.serialLog, '', { mode: 0o600 });
  await writeFile(f.vmmLog, '', { mode: 0o600 });
}

/** The pid and its kernel start time: together they name this one process, never a recycled pid. */
export async function writePid(dir: string, pid: number): Promise<void> {
  const start = await procStartTime(pid);
  await writeFile(vmFiles(dir).pid, start ? `${pid} ${start}` : String(pid), { mode: 0o600 });
}

export interface PidRecord {
  pid: number;
  start?: string | undefined;
}

export async function readPidRecord(dir: string): Promise<PidRecord | undefined> {
  try {
    const [p, start] = (await readFile(vmFiles(dir).pid, 'utf8')).trim().split(/\s+/);
    const pid = Number(p);
    return Number.isInteger(pid) && pid > 0 ? { pid, start } : undefined;
  } catch {
    return undefined;
  }
}

export async function readPid(dir: string): Promise<number | undefined> {
  return (await readPidRecord(dir))?.pid;
}

export async function readRecord(dir: string): Promise<VmRecord | undefined> {
  try {
    return JSON.parse(await readFile(vmFiles(dir).record, 'utf8')) as VmRecord;
  } catch {
    return undefined;
  }
}

/** Agent ids with a VM directory under `base`. */
export async function listVmIds(base: string): Promise<string[]> {
  try {
    return (await readdir(join(base, 'firecracker'))).filter((n) => SAFE_ID.test(n));
  } catch {
    return [];
  }
}

/** Remove the whole `<base>/firecracker/<agentId>` tree. Idempotent. */
export async function removeVmDir(base: string, agentId: string): Promise<void> {
  await rm(join(base, 'firecracker', agentId), { recursive: true, force: true });
}
