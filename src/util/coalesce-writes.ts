/** The part of a socket that holds writes back. */
export interface Corkable {
  cork(): void;
  uncork(): void;
}

/** Call before each write; `flush()` lets what is held go at once. */
export interface HeldWrites {
  (): void;
  flush(): void;
}

/**
 * Frames written in one turn of the event loop leave as one write. On loopback and in VMs each
 * socket write is a system call that also runs the peer's TCP receive path, which costs more than
 * encoding a small message; a result's acknowledgement and the next job's assignment, or a job's
 * last step end and its result, are written together this way. Call the returned function before
 * each write: the first call in a turn corks the socket, and it is uncorked once the turn's other
 * callbacks have run (setImmediate), so a frame waits at most that long.
 *
 * "The turn" can be long: a chain of promises that never waits for I/O (statements on the embedded
 * database, its fsync) runs before any immediate. A frame someone is waiting on (a job's assignment:
 * the agent starts nothing until it arrives) calls `flush()` after its write, taking along whatever
 * this turn wrote before it.
 */
export function coalesceWrites(socket: Corkable): HeldWrites {
  let corked = false;
  const release = () => {
    if (!corked) return;
    corked = false;
    socket.uncork();
  };
  const hold = () => {
    if (corked) return;
    corked = true;
    socket.cork();
    setImmediate(release);
  };
  return Object.assign(hold, { flush: release });
}
