import type { Scheduler } from '@fairgate/scheduler';
import { isAdapterEntry, type PodModels } from './pod-models.js';
import type { PodPool } from './pods.js';

export interface AdapterLoaderOptions {
  pods: PodPool;
  models: PodModels;
  /** routing.lora_paths of the pool (read per load: hot reload). */
  paths: () => Readonly<Record<string, string>>;
  /** upstream.models_refresh_ms: how often the pods' /v1/models lists are read. */
  refreshMs: () => number;
  /** Each load's end, by pod and result (fairgate_lora_loads_total). */
  onLoad: (pod: string, result: LoadResult) => void;
  scheduler: Pick<Scheduler, 'dropPodAdapter'>;
  log: (line: string) => void;
  onError: (operation: string) => void;
}

/** How a load ended: done now, found done (already listed or loaded), or not possible. */
export type LoadResult = 'loaded' | 'held' | 'failed' | 'no_path';

/**
 * `routing.lora_load: on` (docs/routing.md, *LoRA adapters*): before a request for an adapter
 * is forwarded to its pod, the pod is made to hold it with vLLM's
 * `POST /v1/load_lora_adapter {lora_name, lora_path}`, unless this replica knows it holds
 * it already (the pod's last `/v1/models`, or a load this replica made or saw answered).
 * Concurrent requests for the same adapter on the same pod share one load; another replica's
 * load of it is vLLM's 400 "has already been loaded", which counts as done. A load this
 * replica saw done counts for two list reads (2 x `upstream.models_refresh_ms`); after that
 * only the pod's list does, so a pod that restarted (and lost what was loaded at run time)
 * is made to load it again. The path is
 * `routing.lora_paths`'s, else the `root` of a pod that lists the adapter. A failed load
 * drops the scheduler's claim of the adapter on that pod (dropPodAdapter), so the next
 * request for it is not sent there for it; the request itself is forwarded anyway and the
 * pod answers for it (404 for an adapter it does not hold).
 */
export class AdapterLoader {
  /** `pod\0adapter` this replica saw loaded -> when (performance.now() ms). */
  readonly #loaded = new Map<string, number>();
  readonly #loading = new Map<string, Promise<LoadResult>>();

  constructor(private readonly options: AdapterLoaderOptions) {}

  /** Makes `pod` hold `adapter` (at most one load of it at a time from this replica). */
  ensure(pod: string, adapter: string): Promise<LoadResult> | LoadResult {
    const key = `${pod}\u0000${adapter}`;
    if (this.options.models.listedBy(pod)?.some((entry) => entry.id === adapter)) return 'held';
    const loadedAt = this.#loaded.get(key);
    if (loadedAt !== undefined) {
      if (performance.now() - loadedAt <= 2 * this.options.refreshMs()) return 'held';
      this.#loaded.delete(key);
    }
    let loading = this.#loading.get(key);
    if (!loading) {
      loading = this.#load(pod, adapter, key).finally(() => this.#loading.delete(key));
      this.#loading.set(key, loading);
    }
    return loading;
  }

  /**
   * `pod` answered 404 for `adapter` (it restarted and lost what was loaded at run time, or
   * it was unloaded): it holds it no more, for this replica's lists and loads and for the
   * scheduler, so the next request for it is not sent there for it (or, with
   * `routing.lora_load: on`, has it loaded again).
   */
  async missing(pod: string, adapter: string): Promise<void> {
    this.#loaded.delete(`${pod}\u0000${adapter}`);
    this.options.models.unlist(pod, adapter);
    await this.options.scheduler
      .dropPodAdapter(pod, adapter)
      .catch(() => this.options.onError('dropPodAdapter'));
  }

  #pathOf(adapter: string): string | undefined {
    const configured = this.options.paths()[adapter];
    if (configured !== undefined) return configured;
    const entry = this.options.models.get(adapter);
    return entry && isAdapterEntry(entry) && typeof entry.root === 'string'
      ? entry.root
      : undefined;
  }

  async #load(pod: string, adapter: string, key: string): Promise<LoadResult> {
    const result = await this.#request(pod, adapter, key);
    this.options.onLoad(pod, result);
    return result;
  }

  async #request(pod: string, adapter: string, key: string): Promise<LoadResult> {
    const { pods, log, onError, scheduler } = this.options;
    const path = this.#pathOf(adapter);
    const state = pods.get(pod);
    if (path === undefined || !state) return 'no_path';
    try {
      const response = await state.pool.request({
        method: 'POST',
        path: '/v1/load_lora_adapter',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ lora_name: adapter, lora_path: path }),
        headersTimeout: 60_000,
        bodyTimeout: 60_000,
      });
      const text = await response.body.text();
      if (response.statusCode === 200) {
        this.#loaded.set(key, performance.now());
        return 'loaded';
      }
      // Another replica (or an earlier life of this one) loaded it: vLLM's answer.
      if (response.statusCode === 400 && text.includes('already been loaded')) {
        this.#loaded.set(key, performance.now());
        return 'held';
      }
      log(`fairgate: loading adapter ${adapter} on pod ${pod}: ${response.statusCode} ${text}`);
    } catch (error) {
      log(`fairgate: loading adapter ${adapter} on pod ${pod} failed: ${String(error)}`);
    }
    await scheduler.dropPodAdapter(pod, adapter).catch(() => onError('dropPodAdapter'));
    return 'failed';
  }
}
