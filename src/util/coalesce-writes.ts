/** The part of a socket that holds writes back. */
export interface Corkable {
  cork(): void;
  uncork(): void;
}

/**
 * Frames written in one turn of the event loop leave as one write. On loopback and in VMs each
 * socket write is a system call that also runs the peer's TCP receive path, which costs more than
 * encoding a small message; a result's acknowledgement and the next job's assignment, or a job's
 * last step end and its result, are written together this way. Call the returned function before
 * each write: the first call in a turn corks the socket, and it is uncorked once the turn's other
 * callbacks have run (setImmediate), so a frame waits at most that long.
 */
export function coalesceWrites(socket: Corkable): () => void {
  let corked = false;
  const release = () => {
    corked = false;
    socket.uncork();
  };
  return () => {
    if (corked) return;
    corked = true;
    socket.cork();
    setImmediate(release);
  };
}
