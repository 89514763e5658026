import type { PodPool } from './pods.js';

/** One entry of a pod's GET /v1/models (vLLM adds root, parent, max_model_len...). */
export interface ModelEntry {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  [key: string]: unknown;
}

/**
 * What a pool's pods serve, by their own GET /v1/models (vLLM lists its base model and
 * every LoRA adapter loaded, at run time too): read from every healthy pod every
 * `upstream.models_refresh_ms`. `GET /v1/models` answers from it, and a pool with
 * `discover_models` serves every model in it. A pod that does not answer keeps what it
 * listed last, so a model stays routed (and answers 503 while no pod is healthy) rather
 * than turning into a 404.
 */
export class PodModels {
  /** Per pod: the entries of its last answer. */
  readonly #byPod = new Map<string, ModelEntry[]>();
  /** Every pod's entries by id (the first pod listing an id gives its entry). */
  #byId = new Map<string, ModelEntry>();
  #timer: NodeJS.Timeout | undefined;
  #refreshing: Promise<void> | undefined;
  #firstRead: Promise<void> | undefined;

  constructor(
    private readonly pods: PodPool,
    private readonly refreshMs: () => number,
  ) {}

  get(id: string): ModelEntry | undefined {
    return this.#byId.get(id);
  }

  has(id: string): boolean {
    return this.#byId.has(id);
  }

  all(): ModelEntry[] {
    return [...this.#byId.values()];
  }

  /** What `pod` listed last; undefined before it first answered. */
  listedBy(pod: string): readonly ModelEntry[] | undefined {
    return this.#byPod.get(pod);
  }

  /**
   * `pod` answered 404 for `id`: its last list is out of date (it restarted, or unloaded
   * it). The entry goes from that pod's list until its next read.
   */
  unlist(pod: string, id: string): void {
    const entries = this.#byPod.get(pod);
    if (entries?.some((entry) => entry.id === id)) {
      this.#byPod.set(
        pod,
        entries.filter((entry) => entry.id !== id),
      );
    }
  }

  /** Resolves once the pods' lists have been read (at once after the first read). */
  ready(): Promise<void> {
    this.#firstRead ??= this.refresh();
    return this.#firstRead;
  }

  /** Reads every healthy pod's list now (one read at a time: a call during one joins it). */
  refresh(): Promise<void> {
    this.#refreshing ??= this.#read().finally(() => {
      this.#refreshing = undefined;
    });
    return this.#refreshing;
  }

  /** The first read at once, then one every `upstream.models_refresh_ms`. */
  start(): void {
    if (this.#timer) return;
    const loop = async () => {
      await (this.#firstRead ? this.refresh() : this.ready());
      if (this.#timer) this.#timer = setTimeout(loop, this.refreshMs()).unref();
    };
    this.#timer = setTimeout(loop, 0).unref();
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async #read(): Promise<void> {
    const configured = new Set(this.pods.all.map((pod) => pod.config.name));
    for (const name of this.#byPod.keys()) if (!configured.has(name)) this.#byPod.delete(name);
    await Promise.all(
      this.pods.healthyPods().map(async (pod) => {
        try {
          const response = await pod.pool.request({
            method: 'GET',
            path: '/v1/models',
            headersTimeout: 2_000,
            bodyTimeout: 2_000,
          });
          if (response.statusCode !== 200) {
            await response.body.dump();
            return;
          }
          const body = (await response.body.json()) as { data?: unknown };
          if (Array.isArray(body.data)) {
            this.#byPod.set(pod.config.name, body.data.filter(isModelEntry));
          }
        } catch {
          // unreachable or not JSON: the pod keeps what it listed last
        }
      }),
    );
    const byId = new Map<string, ModelEntry>();
    for (const entries of this.#byPod.values()) {
      for (const entry of entries) if (!byId.has(entry.id)) byId.set(entry.id, entry);
    }
    this.#byId = byId;
  }
}

function isModelEntry(value: unknown): value is ModelEntry {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { id?: unknown }).id === 'string' &&
    (value as { id: string }).id.length > 0
  );
}

/**
 * Whether an entry is a LoRA adapter: vLLM lists each adapter with `parent`, the base model
 * it applies to (the base model's own entry has parent null), and `root`, its path.
 */
export function isAdapterEntry(entry: ModelEntry): boolean {
  return typeof entry.parent === 'string' && entry.parent !== '' && entry.parent !== entry.id;
}
