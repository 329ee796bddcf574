/**
 * A small synchronous event channel with one payload type per event name. Owners keep the
 * `TypedEvents` and emit; everyone else gets its `EventsView`, which can only listen. Listeners run
 * in the emitter's turn and must not throw (an error is reported to `onListenerError` and the
 * remaining listeners still run): a test's or an embedder's listener never breaks the server.
 */
export type EventMap = Record<string, unknown>;

export interface EventsView<E extends EventMap> {
  /** Call `listener` on every `name` event until the returned function is called. */
  on<K extends keyof E>(name: K, listener: (event: E[K]) => void): () => void;
  /** The next `name` event that `match` accepts (any, without `match`). */
  next<K extends keyof E>(name: K, match?: (event: E[K]) => boolean): Promise<E[K]>;
}

export class TypedEvents<E extends EventMap> implements EventsView<E> {
  private readonly listeners = new Map<keyof E, Set<(event: never) => void>>();

  constructor(private readonly onListenerError: (err: unknown) => void = () => {}) {}

  on<K extends keyof E>(name: K, listener: (event: E[K]) => void): () => void {
    let set = this.listeners.get(name);
    if (!set) this.listeners.set(name, (set = new Set()));
    const entry = listener as (event: never) => void;
    set.add(entry);
    return () => void set.delete(entry);
  }

  next<K extends keyof E>(name: K, match: (event: E[K]) => boolean = () => true): Promise<E[K]> {
    return new Promise((resolve) => {
      const off = this.on(name, (event) => {
        if (!match(event)) return;
        off();
        resolve(event);
      });
    });
  }

  emit<K extends keyof E>(name: K, event: E[K]): void {
    const set = this.listeners.get(name);
    if (!set) return;
    for (const listener of [...set]) {
      try {
        (listener as (event: E[K]) => void)(event);
      } catch (err) {
        this.onListenerError(err);
      }
    }
  }

  /** This channel as its listeners see it. */
  view(): EventsView<E> {
    return { on: (name, listener) => this.on(name, listener), next: (name, match) => this.next(name, match) };
  }
}
