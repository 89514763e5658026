import type { ServerResponse } from 'node:http';

/**
 * Whether the client is still there, and what to run when it leaves. One small object per
 * request: on Node it is one 'close' listener on the response; a web AbortSignal (what
 * `c.req.raw.signal` gives) makes @hono/node-server build a full web Request and Node
 * build a transferable AbortSignal, together ~10% of the sim's CPU per request at
 * thousands of requests per second.
 */
export class ClientLink {
  gone = false;
  /**
   * Usually zero to two: an array costs less memory per request than a Set, and one made
   * on the first listener (exactly sized) less than an empty one grown by a push.
   */
  #listeners: Array<() => void> | undefined;

  /** Follows a Node response: the client left when it closed before being fully written. */
  static ofResponse(outgoing: ServerResponse): ClientLink {
    const link = new ClientLink();
    // `on`, not `once`: a response closes once, and `once` adds a wrapper, its state and a
    // bound function to every request.
    outgoing.on('close', () => {
      if (!outgoing.writableFinished) link.leave();
    });
    return link;
  }

  /** Follows a web AbortSignal (requests served without a socket: app.request() in tests). */
  static ofSignal(signal: AbortSignal): ClientLink {
    const link = new ClientLink();
    if (signal.aborted) link.gone = true;
    else signal.addEventListener('abort', () => link.leave(), { once: true });
    return link;
  }

  /** Runs `listener` once when the client leaves (at once if it already has); returns an unsubscribe. */
  onLeave(listener: () => void): () => void {
    if (this.gone) {
      listener();
      return () => {};
    }
    if (this.#listeners) this.#listeners.push(listener);
    else this.#listeners = [listener];
    return () => {
      const at = this.#listeners?.indexOf(listener) ?? -1;
      if (at >= 0) this.#listeners!.splice(at, 1);
    };
  }

  leave(): void {
    if (this.gone) return;
    this.gone = true;
    const listeners = this.#listeners;
    this.#listeners = undefined;
    for (const listener of listeners ?? []) listener();
  }
}
