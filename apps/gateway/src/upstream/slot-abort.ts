/**
 * What aborts a granted request's upstream call: the client leaving, or the scheduler
 * evicting it. A plain object with the part of AbortSignal the upstream code uses; a web
 * AbortController per request costs ~15 us of CPU on Node 20 (its signal is built
 * transferable), a measurable share of a request. upstream/exchange.ts listens to it and
 * aborts undici's dispatch.
 */
export class SlotAbort {
  aborted = false;
  reason: Error | undefined = undefined;
  #listeners: Array<() => void> = [];

  abort(reason: Error): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.#listeners;
    this.#listeners = [];
    for (const listener of listeners) listener();
  }

  /** Runs `listener` once on abort (not for an abort already past). */
  addEventListener(_type: 'abort', listener: () => void): void {
    if (!this.aborted) this.#listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const index = this.#listeners.indexOf(listener);
    if (index >= 0) this.#listeners.splice(index, 1);
  }
}
