import { randomBytes } from 'node:crypto';
import { type TokenWeights, weightedTokens } from '@fairgate/core';
import type { Usage } from '@fairgate/openai';
import type { Scheduler, UsageCount } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';

export interface UsageMeterOptions {
  scheduler: Pick<Scheduler, 'meterUsage'>;
  metrics: Pick<GatewayMetrics, 'tokens' | 'serviceTokens' | 'redisErrors'>;
  /** The pool's token weights (scheduler.token_weights): what a token of service costs. */
  tokenWeights: () => TokenWeights;
  retentionS: () => number;
  flushMs: () => number;
}

/**
 * One pool's usage on this replica: what the pods reported at release, per tenant and
 * model, added to the shared hourly buckets (meterUsage) every `usage.flush_ms` and to
 * `fairgate_tokens_total` at once. Counting off the request path keeps its cost to a map
 * update. A replica killed between flushes loses at most one flush of counts; a count is
 * never applied twice (a failed flush is sent again under its id, which Redis applies once).
 */
export class UsageMeter {
  readonly #pending = new Map<string, UsageCount>();
  readonly #bound = new Map<
    string,
    Record<'input' | 'output' | 'cached', { inc(n: number): void }>
  >();
  /** A flush that failed, sent again (same id: applied at most once) before new counts. */
  #unsent: { id: string; counts: UsageCount[] } | undefined;
  #flushes = 0;
  readonly #prefix = `${process.pid}-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();

  constructor(private readonly options: UsageMeterOptions) {}

  readonly #service = new Map<string, { inc(n: number): void }>();

  /**
   * A request released with the pod's usage, in band `band` (its priority): its tokens, and
   * its weighted tokens as service (fairgate_service_tokens_total).
   */
  record(tenant: string, model: string, usage: Usage, band: number): void {
    const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
    const key = `${tenant}|${model}`;
    let count = this.#pending.get(key);
    if (!count) {
      count = { tenant, model, requests: 0, inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
      this.#pending.set(key, count);
    }
    count.requests += 1;
    count.inputTokens += usage.prompt_tokens;
    count.outputTokens += usage.completion_tokens;
    count.cachedTokens += cached;
    const series = this.#series(key, tenant, model);
    series.input.inc(usage.prompt_tokens);
    series.output.inc(usage.completion_tokens);
    if (cached > 0) series.cached.inc(cached);
    const serviceKey = `${tenant}|${band}`;
    let service = this.#service.get(serviceKey);
    if (!service) {
      service = this.options.metrics.serviceTokens.labels({ tenant, band: String(band) });
      this.#service.set(serviceKey, service);
    }
    service.inc(
      weightedTokens(usage.prompt_tokens, usage.completion_tokens, this.options.tokenWeights()),
    );
  }

  /** The tenant's and model's fairgate_tokens_total series, bound once. */
  #series(key: string, tenant: string, model: string) {
    let series = this.#bound.get(key);
    if (!series) {
      const { tokens } = this.options.metrics;
      series = {
        input: tokens.labels({ tenant, model, direction: 'input' }),
        output: tokens.labels({ tenant, model, direction: 'output' }),
        cached: tokens.labels({ tenant, model, direction: 'cached' }),
      };
      this.#bound.set(key, series);
    }
    return series;
  }

  start(): void {
    const loop = () => {
      this.#flushing = this.flush().finally(() => {
        if (this.#timer) this.#timer = setTimeout(loop, this.options.flushMs()).unref();
      });
    };
    this.#timer = setTimeout(loop, this.options.flushMs()).unref();
  }

  /** Stops the timer and sends what is counted (a drain's last requests included). */
  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#flushing;
    await this.flush();
  }

  /**
   * Sends a flush that failed before (with its id: a timeout may hide a write Redis did,
   * and the id makes the retry count at most once), then the counts since.
   */
  async flush(): Promise<void> {
    if (!this.#unsent && this.#pending.size === 0) return;
    const flush = this.#unsent ?? {
      id: `${this.#prefix}-${++this.#flushes}`,
      counts: [...this.#pending.values()],
    };
    if (!this.#unsent) this.#pending.clear();
    try {
      await this.options.scheduler.meterUsage(flush.counts, this.options.retentionS(), flush.id);
      this.#unsent = undefined;
    } catch {
      this.options.metrics.redisErrors.inc({ operation: 'meterUsage' });
      this.#unsent = flush;
    }
  }
}
