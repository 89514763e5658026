import { encodeWindow, LatencyHistogram } from '@fairgate/control';
import type { Scheduler } from '@fairgate/scheduler';

export interface LatencyRecorderOptions {
  scheduler: Pick<Scheduler, 'flushLatency'>;
  /** Flush period (1 s: the window is kept per store second). */
  flushMs?: number;
  onError?: (error: unknown) => void;
}

/**
 * This replica's share of the shared TTFT window: gateway TTFT (t5 - t1) of SLO-protected
 * requests into a log-bucket histogram, their service TTFT (t5 - t2: without the queue
 * wait) into another, and the count of those requests that failed
 * upstream before a first token. Flushed once a second in one call; the store stamps the
 * counts with its own second, so replicas' clocks never matter. A failed flush keeps the
 * counts for the next one.
 */
export class LatencyRecorder {
  #ttft = new LatencyHistogram();
  #serviceTtft = new LatencyHistogram();
  #errors = 0;
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> | undefined;

  constructor(private readonly options: LatencyRecorderOptions) {}

  /** A first token: the gateway TTFT (t5 - t1) and the queue wait (t2 - t1) in it. */
  recordTtft(seconds: number, queueSeconds: number): void {
    this.#ttft.observe(Math.max(0, seconds));
    this.#serviceTtft.observe(Math.max(0, seconds - queueSeconds));
  }

  /** An upstream error status or timeout before the first token. */
  recordFailure(): void {
    this.#errors += 1;
  }

  start(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => void this.flush(), this.options.flushMs ?? 1_000);
    this.#timer.unref();
  }

  /** Sends what was recorded since the last flush (one call; nothing when idle). */
  flush(): Promise<void> {
    this.#flushing ??= this.#flush().finally(() => {
      this.#flushing = undefined;
    });
    return this.#flushing;
  }

  async #flush(): Promise<void> {
    const ttft = this.#ttft.take();
    const serviceTtft = this.#serviceTtft.take();
    const errors = this.#errors;
    this.#errors = 0;
    if (ttft.size === 0 && errors === 0) return;
    try {
      await this.options.scheduler.flushLatency(encodeWindow({ ttft, serviceTtft, errors }));
    } catch (error) {
      this.#ttft.add(ttft);
      this.#serviceTtft.add(serviceTtft);
      this.#errors += errors;
      this.options.onError?.(error);
    }
  }

  /** Stops the timer and flushes what is left. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.flush();
  }
}
