import { open } from 'node:fs/promises';

/**
 * Follows a file a VMM writes (serial console, VMM log) by polling: the writer is another process
 * that may outlive us, so there is no pipe to read. Lines are handed over whole; a partial last
 * line waits for its newline (or for stop()).
 */
export class FileTail {
  private offset = 0;
  private partial = '';
  private timer: NodeJS.Timeout | undefined;
  private reading: Promise<void> = Promise.resolve();

  constructor(
    private readonly path: string,
    private readonly onLine: (line: string) => void,
    private readonly intervalMs = 200,
  ) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      this.reading = this.reading.then(() => this.readMore());
    }, this.intervalMs);
    this.timer.unref();
  }

  /** Stop polling after forwarding what is already in the file. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.reading;
    await this.readMore();
    if (this.partial) this.onLine(this.partial);
    this.partial = '';
  }

  private async readMore(): Promise<void> {
    let fh;
    try {
      fh = await open(this.path, 'r');
    } catch {
      return; // not created yet, or already removed with the VM directory
    }
    try {
      const buf = Buffer.alloc(64 * 1024);
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, buf.length, this.offset);
        if (bytesRead === 0) break;
        this.offset += bytesRead;
        const text = this.partial + buf.subarray(0, bytesRead).toString('utf8');
        const lines = text.split(/\r?\n/);
        this.partial = lines.pop() ?? '';
        for (const line of lines) if (line) this.onLine(line);
      }
    } finally {
      await fh.close();
    }
  }
}

export type BootFailure = 'kernel-panic' | 'init-failure' | 'rootfs-mount-failure' | 'unknown';

const PATTERNS: [RegExp, BootFailure][] = [
  [/unable to mount root fs|VFS: Cannot open root device/i, 'rootfs-mount-failure'],
  [/Kernel panic|not syncing/i, 'kernel-panic'],
  [/failed to execute \/init|No working init found|Failed to start/i, 'init-failure'],
];

/** A serial line that means the boot went wrong, and how; undefined for an ordinary line. */
export function bootFailureOf(line: string): BootFailure | undefined {
  return PATTERNS.find(([re]) => re.test(line))?.[1];
}
