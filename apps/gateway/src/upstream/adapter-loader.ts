import type { Scheduler } from '@fairgate/scheduler';
import { isAdapterEntry, type PodModels } from './pod-models.js';
import type { PodPool } from './pods.js';

export interface AdapterLoaderOptions {
  pods: PodPool;
  models: PodModels;
  /** routing.lora_paths of the pool (read per load: hot reload). */
  paths: () => Readonly<Record<string, string>>;
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
 * load of it is vLLM's 400 "has already been loaded", which counts as done. The path is
 * `routing.lora_paths`'s, else the `root` of a pod that lists the adapter. A failed load
 * drops the scheduler's claim of the adapter on that pod (dropPodAdapter), so the next
 * request for it is not sent there for it; the request itself is forwarded anyway and the
 * pod answers for it (404 for an adapter it does not hold).
 */
export class AdapterLoader {
  /** `pod\0adapter` this replica saw loaded. */
  readonly #loaded = new Set<string>();
  readonly #loading = new Map<string, Promise<LoadResult>>();
  /** Loads this replica made that the pod answered with success (tests read it). */
  loads = 0;

  constructor(private readonly options: AdapterLoaderOptions) {}

  /** Makes `pod` hold `adapter` (at most one load of it at a time from this replica). */
  ensure(pod: string, adapter: string): Promise<LoadResult> | LoadResult {
    const key = `${pod}\u0000${adapter}`;
    if (this.#loaded.has(key)) return 'held';
    if (this.options.models.listedBy(pod)?.some((entry) => entry.id === adapter)) {
      this.#loaded.add(key);
      return 'held';
    }
    let loading = this.#loading.get(key);
    if (!loading) {
      loading = this.#load(pod, adapter, key).finally(() => this.#loading.delete(key));
      this.#loading.set(key, loading);
    }
    return loading;
  }

  /** Forgets what this replica knows of `pod` (it restarted or left). */
  forgetPod(pod: string): void {
    for (const key of this.#loaded) if (key.startsWith(`${pod}\u0000`)) this.#loaded.delete(key);
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
        this.loads += 1;
        this.#loaded.add(key);
        return 'loaded';
      }
      // Another replica (or an earlier life of this one) loaded it: vLLM's answer.
      if (response.statusCode === 400 && text.includes('already been loaded')) {
        this.#loaded.add(key);
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
