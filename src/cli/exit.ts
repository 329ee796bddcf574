/**
 * Ending a command-line process without losing output. When stdout is a pipe, Node writes to it
 * asynchronously: `process.exit` right after a large write drops whatever the reader has not taken
 * yet. So every bin ends through `exitWhenFlushed`, which waits until both streams have handed
 * their queued bytes to the kernel (or failed, e.g. EPIPE from `| head`), then exits.
 */

function flushed(stream: NodeJS.WriteStream): Promise<void> {
  if (stream.destroyed || stream.writableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      stream.off('error', done);
      resolve();
    };
    // A reader that went away (EPIPE) must not keep us waiting, nor crash us.
    stream.once('error', done);
    // Writes complete in order, so an empty write's callback runs after every earlier byte is out.
    stream.write('', () => done());
  });
}

/** Wait for stdout and stderr to drain, then exit with `code`. */
export async function exitWhenFlushed(code: number): Promise<never> {
  await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
  process.exit(code);
}
