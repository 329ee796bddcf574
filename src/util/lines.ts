/** Longest line handed on; output that never ends a line is cut into pieces of this many characters. */
export const MAX_LINE_CHARS = 64 * 1024;

/**
 * Call `onLine` for every line of a text stream (without its line ending). Output that never ends
 * a line is flushed in 64 KiB pieces so memory stays bounded; a trailing partial line is flushed at
 * the end, also when the stream is destroyed rather than ended (a step runner detaching a pipe that
 * a background process still holds).
 */
export function onLines(
  stream: NodeJS.ReadableStream | null | undefined,
  onLine: (line: string) => void,
): void {
  if (!stream) return;
  let buf = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      cut(buf.slice(0, nl).replace(/\r$/, ''), onLine);
      buf = buf.slice(nl + 1);
    }
    while (buf.length > MAX_LINE_CHARS) {
      const at = pieceEnd(buf);
      onLine(buf.slice(0, at));
      buf = buf.slice(at);
    }
  });
  const rest = () => {
    if (buf) cut(buf, onLine);
    buf = '';
  };
  stream.on('end', rest);
  stream.on('close', rest);
}

/** Hand on a complete line, in pieces when it is longer than the limit. */
function cut(line: string, onLine: (line: string) => void): void {
  while (line.length > MAX_LINE_CHARS) {
    const at = pieceEnd(line);
    onLine(line.slice(0, at));
    line = line.slice(at);
  }
  onLine(line);
}

/** Where the next piece ends: at the limit, but never between the halves of a surrogate pair. */
function pieceEnd(s: string): number {
  const code = s.charCodeAt(MAX_LINE_CHARS - 1);
  return code >= 0xd800 && code <= 0xdbff ? MAX_LINE_CHARS - 1 : MAX_LINE_CHARS;
}
