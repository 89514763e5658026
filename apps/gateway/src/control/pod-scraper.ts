import type { FairgateConfig, PodConfig } from '@fairgate/config';
import { addGaugeSample, emptyGaugeSums, type GaugeSums } from '@fairgate/control';
import { isValidName } from '@fairgate/core';
import { parseVllmMetrics, type VllmMetrics } from '@fairgate/openai';
import type { Fence, PodAdapterReport, PodLoadReport, Scheduler } from '@fairgate/scheduler';
import type { GatewayMetrics } from '@fairgate/telemetry';
import { request } from 'undici';
import { isAdapterEntry, type ModelEntry } from '../upstream/pod-models.js';
import type { LeaderElection } from './election.js';
import { LeaderTimer } from './leader-timer.js';

/** One successful scrape of one pod. */
export interface PodScrape {
  pod: string;
  /** performance.now() when the answer arrived. */
  atMs: number;
  metrics: VllmMetrics;
  /** The pod's gauge samples since the scraper started, cumulative (the tuner's occupancy). */
  gauges: GaugeSums;
}

/** GETs a pod's /metrics text; rejects on error, non-2xx or timeout. */
export type MetricsFetcher = (url: string, timeoutMs: number) => Promise<string>;

/**
 * undici's request(), not fetch(): the leader scrapes every pod every interval_ms (100 ms
 * by default), and a fetch() (its web Request, Headers and Response and a web stream body)
 * costs ~1.7x the CPU: 446 against 261 µs per scrape on a 2-core VM (`npm run bench:scrape
 * -w @fairgate/loadtest`), a stall every request of this replica waits out when it comes
 * at the wrong time.
 */
export const fetchMetrics: MetricsFetcher = async (url, timeoutMs) => {
  const { statusCode, body } = await request(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (statusCode < 200 || statusCode >= 300) {
    await body.dump();
    throw new Error(`GET ${url}: ${statusCode}`);
  }
  return body.text();
};

export interface PodScraperOptions {
  store: Pick<Scheduler, 'reportPodLoad' | 'forgetPrefixes'> &
    Partial<Pick<Scheduler, 'reportPodAdapters'>>;
  election: Pick<LeaderElection, 'holds'>;
  config: () => FairgateConfig;
  /** The pods to scrape (the config's and the discovered ones); default: the config's. */
  pods?: () => readonly PodConfig[];
  metrics: GatewayMetrics;
  log: (line: string) => void;
  fetcher?: MetricsFetcher;
  /**
   * What each pod listed last on GET /v1/models (undefined before it answered): with the
   * scrape's vllm:lora_requests_info, the LoRA adapters it holds (reportPodAdapters).
   */
  models?: { listedBy(pod: string): readonly ModelEntry[] | undefined };
}

/** The leader sends an unchanged adapter report again after this long (Redis may have lost it). */
const ADAPTER_REPORT_REPEAT_MS = 2_000;

/**
 * The leader's scrape of every pod's vLLM /metrics, every scrape.interval_ms: one request
 * per pod with scrape.timeout_ms, all pods at once. The gauges go to the scheduler in one
 * fenced reportPodLoad (admission and saturation gating); a pod that failed is simply left
 * out, so its last report ages and counts as saturated once stale. The latest scrape of
 * each pod stays here for the capacity tuner. A pod whose counters went down restarted: its
 * KV cache is empty, so its entries in the prefix index go (forgetPrefixes). Rounds never
 * overlap; only the leader runs.
 */
export class PodScraper {
  readonly #timer = new LeaderTimer({
    periodMs: () => this.options.config().scrape.interval_ms,
    from: 'start',
  });
  readonly #latest = new Map<string, PodScrape>();
  readonly #failing = new Set<string>();
  readonly #gauges = new Map<string, GaugeSums>();
  #reportRefused = false;
  /** The last adapter report sent and when (performance.now()). */
  #adaptersSent = '';
  #adaptersSentAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: PodScraperOptions) {}

  /** The last successful scrape of `pod` (kept across leadership changes). */
  latest(pod: string): PodScrape | undefined {
    return this.#latest.get(pod);
  }

  lead(fence: Fence): void {
    this.#reportRefused = false;
    this.#timer.start(() => this.scrapeOnce(fence), 0);
  }

  /** Called when leadership ends: no further rounds; the per-pod gauges are cleared. */
  stepDown(): void {
    this.#timer.stop();
    const m = this.options.metrics;
    for (const gauge of [m.podWaiting, m.podRunning, m.podKvCacheUsage]) gauge.reset();
  }

  async stop(): Promise<void> {
    this.stepDown();
    await this.#timer.settled();
  }

  /** One round under `fence`: scrapes every pod, reports the gauges; returns the successes. */
  async scrapeOnce(fence: Fence): Promise<PodScrape[]> {
    const { config, metrics, election, store, log } = this.options;
    const cfg = config();
    const fetcher = this.options.fetcher ?? fetchMetrics;
    const pods = this.options.pods?.() ?? cfg.pods;
    this.#forgetGone(pods);
    const results = await Promise.all(
      pods.map(async (pod): Promise<PodScrape | null> => {
        try {
          const text = await fetcher(new URL('/metrics', pod.url).href, cfg.scrape.timeout_ms);
          const parsed = parseVllmMetrics(text);
          const sums = this.#gauges.get(pod.name) ?? emptyGaugeSums();
          this.#gauges.set(pod.name, sums);
          if (parsed.running !== null) {
            addGaugeSample(sums, parsed.running, parsed.waiting ?? 0);
          }
          const scrape: PodScrape = {
            pod: pod.name,
            atMs: performance.now(),
            metrics: parsed,
            gauges: structuredClone(sums),
          };
          metrics.podScrapes.inc({ pod: pod.name, result: 'ok' });
          if (this.#failing.delete(pod.name)) log(`fairgate: scrape of pod ${pod.name} recovered`);
          return scrape;
        } catch (error) {
          metrics.podScrapes.inc({ pod: pod.name, result: 'error' });
          // No value rather than the last one: the dashboard shows the gap.
          for (const gauge of [metrics.podWaiting, metrics.podRunning, metrics.podKvCacheUsage]) {
            gauge.remove({ pod: pod.name });
          }
          if (!this.#failing.has(pod.name)) {
            this.#failing.add(pod.name);
            log(`fairgate: scrape of pod ${pod.name} failed: ${String(error)}`);
          }
          return null;
        }
      }),
    );
    const scrapes = results.filter((s): s is PodScrape => s !== null);
    const restarted = scrapes.filter((scrape) => {
      const before = this.#latest.get(scrape.pod);
      return before !== undefined && countersWentDown(before.metrics, scrape.metrics);
    });
    for (const scrape of scrapes) this.#latest.set(scrape.pod, scrape);
    if (!election.holds(fence)) return scrapes;
    if (restarted.length > 0) {
      const pods = restarted.map((scrape) => scrape.pod);
      log(`fairgate: pod ${pods.join(', ')} restarted (counters went down): prefix index dropped`);
      await store.forgetPrefixes(pods).catch(() => {
        metrics.redisErrors.inc({ operation: 'forgetPrefixes' });
      });
    }
    const blockSize = cfg.scheduler.kv_block_size;
    const loads: PodLoadReport[] = scrapes.map(({ pod, metrics: m }) => ({
      pod,
      waiting: Math.max(0, Math.round(m.waiting ?? 0)),
      running: Math.max(0, Math.round(m.running ?? 0)),
      kvUtilization: Math.max(0, m.kvCacheUsage ?? 0),
      // What the pod's KV cache holds, in the gateway's prompt blocks: sizes its prefix index.
      ...(m.cache
        ? {
            prefixCapacity: Math.max(
              1,
              Math.floor((m.cache.blocks * m.cache.blockSize) / blockSize),
            ),
          }
        : {}),
    }));
    for (const load of loads) {
      metrics.podWaiting.set({ pod: load.pod }, load.waiting);
      metrics.podRunning.set({ pod: load.pod }, load.running);
      metrics.podKvCacheUsage.set({ pod: load.pod }, load.kvUtilization);
    }
    if (loads.length === 0) return scrapes;
    try {
      const written = await store.reportPodLoad(fence, loads);
      if (!written && !this.#reportRefused) {
        this.#reportRefused = true;
        log('fairgate: pod load report refused by the fence');
      }
    } catch {
      metrics.redisErrors.inc({ operation: 'reportPodLoad' });
    }
    await this.#reportAdapters(scrapes);
    return scrapes;
  }

  /**
   * The LoRA adapters each scraped pod holds: the adapters of its last /v1/models and those
   * its lora_requests_info says have a request, with its slots (max_lora). Sent when it
   * changed, or every ADAPTER_REPORT_REPEAT_MS. A pod without LoRA (no adapter listed and no
   * lora_requests_info) is left out, and so is one that never answered /v1/models. A grant's
   * claim (lora_load) is kept for two model refreshes and two scrapes, plus a second: the
   * time this replica's /v1/models of the pod may lag the load.
   */
  async #reportAdapters(scrapes: readonly PodScrape[]): Promise<void> {
    const { store, models, config, metrics } = this.options;
    if (!store.reportPodAdapters || !models) return;
    const reports: PodAdapterReport[] = [];
    for (const { pod, metrics: m } of scrapes) {
      const listed = models.listedBy(pod);
      if (!listed) continue;
      const adapters = new Set(listed.filter(isAdapterEntry).map((entry) => entry.id));
      for (const adapter of m.lora?.adapters ?? []) adapters.add(adapter);
      if (adapters.size === 0 && !m.lora) continue;
      const valid = [...adapters].filter(isValidName);
      reports.push({ pod, adapters: valid.sort(), ...(m.lora ? { slots: m.lora.maxLora } : {}) });
    }
    if (reports.length === 0) return;
    const text = JSON.stringify(reports);
    const now = performance.now();
    if (text === this.#adaptersSent && now - this.#adaptersSentAt < ADAPTER_REPORT_REPEAT_MS)
      return;
    const cfg = config();
    const keepClaimsMs = 2 * cfg.upstream.models_refresh_ms + 2 * cfg.scrape.interval_ms + 1_000;
    try {
      await store.reportPodAdapters(reports, keepClaimsMs);
      this.#adaptersSent = text;
      this.#adaptersSentAt = now;
    } catch {
      metrics.redisErrors.inc({ operation: 'reportPodAdapters' });
    }
  }

  /** Drops what is kept of pods that are gone (discovery no longer lists them). */
  #forgetGone(pods: readonly PodConfig[]): void {
    const names = new Set(pods.map((pod) => pod.name));
    for (const pod of new Set([...this.#latest.keys(), ...this.#gauges.keys()])) {
      if (names.has(pod)) continue;
      this.#latest.delete(pod);
      this.#gauges.delete(pod);
      this.#failing.delete(pod);
      const m = this.options.metrics;
      for (const gauge of [m.podWaiting, m.podRunning, m.podKvCacheUsage]) gauge.remove({ pod });
    }
  }
}

/** A restarted pod: one of its monotonic counters is below the previous scrape's. */
function countersWentDown(before: VllmMetrics, after: VllmMetrics): boolean {
  const down = (a: number | null, b: number | null) => a !== null && b !== null && b < a;
  return (
    down(before.promptTokens, after.promptTokens) ||
    down(before.generationTokens, after.generationTokens) ||
    down(before.requestSuccess, after.requestSuccess)
  );
}
