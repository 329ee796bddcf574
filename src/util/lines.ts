/**
 * Call `onLine` for every line of a text stream (without its line ending). Output that never ends
 * a line is flushed in 64 KiB pieces so memory stays bounded; a trailing partial line is flushed at end.
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
      onLine(buf.slice(0, nl).replace(/\r$/, ''));
      buf = buf.slice(nl + 1);
    }
    if (buf.length > 64 * 1024) {
      onLine(buf);
      buf = '';
    }
  });
  stream.on('end', () => {
    if (buf) onLine(buf);
    buf = '';
  });
}
