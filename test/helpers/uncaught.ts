/**
 * Errors that escaped every handler in this process. The server under test runs in the test process,
 * so an exception that would kill a real orchestrator lands here; the runner would only report it
 * at the end, so tests check it themselves after each attack.
 */
const escaped: unknown[] = [];
let watching = false;

export function watchUncaught(): void {
  if (watching) return;
  watching = true;
  process.on('uncaughtException', (err) => escaped.push(err));
  process.on('unhandledRejection', (err) => escaped.push(err));
}

/** What escaped so far, as messages; empty when the server kept every error to itself. */
export function uncaughtErrors(): string[] {
  return escaped.map((e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e)));
}
