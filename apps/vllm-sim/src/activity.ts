import type { ServerResponse } from 'node:http';

/**
 * HTTP-level record of the requests of every endpoint that runs on the engine, for tests
 * and benchmarks that check what a pod actually saw: how many requests arrived, how many
 * were open at once, and the [start, end] of each, stamped with process.hrtime (Linux
 * CLOCK_MONOTONIC, one clock for every process on the machine), so intervals from several
 * sims can be merged exactly to get pool-wide concurrency. A request is open from its
 * arrival until its response finished or its connection closed.
 */
export class RequestActivity {
  received = 0;
  active = 0;
  maxActive = 0;
  readonly #intervals: Array<[bigint, bigint]> = [];

  constructor(private readonly keep = 50_000) {}

  /** Opens one request; `outgoing` closes it (absent under app.request(): closed at once). */
  begin(outgoing: ServerResponse | undefined): void {
    const start = process.hrtime.bigint();
    this.received++;
    this.active++;
    if (this.active > this.maxActive) this.maxActive = this.active;
    if (!outgoing) {
      this.#end(start);
      return;
    }
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      this.#end(start);
    };
    outgoing.once('finish', end);
    outgoing.once('close', end);
  }

  #end(start: bigint): void {
    this.active--;
    this.#intervals.push([start, process.hrtime.bigint()]);
    if (this.#intervals.length > this.keep)
      this.#intervals.splice(0, this.#intervals.length - this.keep);
  }

  stats() {
    return {
      requests_received: this.received,
      active_requests: this.active,
      max_active_requests: this.maxActive,
    };
  }

  /** Finished requests as [startNs, endNs] decimal strings (JSON has no bigint). */
  intervals(): Array<[string, string]> {
    return this.#intervals.map(([start, end]) => [start.toString(), end.toString()]);
  }
}
