/**
 * What aborts a granted request's upstream call: the client leaving, or the scheduler
 * evicting it. A plain object with the part of AbortSignal the upstream code uses; a web
 * AbortController per request costs ~15 us of CPU on Node 20 (its signal is built
 * transferable), a measurable share of a non-streaming request. The streaming path hands
 * undici's request() a real AbortSignal, made on first use by `webSignal()` and kept in step.
 */
export class SlotAbort {
  aborted = false;
  reason: Error | undefined = undefined;
  #listeners: Array<() => void> = [];
  #web: AbortController | undefined;

  abort(reason: Error): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.#listeners;
    this.#listeners = [];
    for (const listener of listeners) listener();
    this.#web?.abort(reason);
  }

  /** Runs `listener` once on abort (not for an abort already past). */
  addEventListener(_type: 'abort', listener: () => void): void {
    if (!this.aborted) this.#listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const index = this.#listeners.indexOf(listener);
    if (index >= 0) this.#listeners.splice(index, 1);
  }

  /** A web AbortSignal that follows this one (for APIs that need one). */
  webSignal(): AbortSignal {
    if (!this.#web) {
      this.#web = new AbortController();
      if (this.aborted) this.#web.abort(this.reason);
    }
    return this.#web.signal;
  }
}
