import { Gauge, type Registry } from 'prom-client';

/**
 * vLLM's two info-style gauges, the ones a gateway reads to learn what a pod holds. Neither
 * has the model_name label: vLLM builds their labels from configuration and state only.
 * Labels are listed alphabetically, as vLLM's /metrics shows them.
 */

/**
 * `vllm:cache_config_info`: value 1, one label per field of vLLM's CacheConfig as Python's
 * str() prints it (CacheConfig.metrics_info()) plus `engine`. The set is vLLM 0.11's; the sim
 * fills block_size and num_gpu_blocks from its flags, the rest with vLLM's defaults (float
 * fields print as floats: pydantic stores the default 4 of swap_space as 4.0).
 */
export function cacheConfigLabels(kvBlocks: number, blockSize: number): Record<string, string> {
  return {
    block_size: String(blockSize),
    cache_dtype: 'auto',
    calculate_kv_scales: 'False',
    cpu_kvcache_space_bytes: 'None',
    cpu_offload_gb: '0.0',
    enable_prefix_caching: 'True',
    engine: '0',
    gpu_memory_utilization: '0.9',
    is_attention_free: 'False',
    kv_cache_memory_bytes: 'None',
    kv_sharing_fast_prefill: 'False',
    mamba_cache_dtype: 'auto',
    mamba_page_size_padded: 'None',
    mamba_ssm_cache_dtype: 'auto',
    num_cpu_blocks: 'None',
    num_gpu_blocks: String(kvBlocks),
    num_gpu_blocks_override: 'None',
    prefix_caching_hash_algo: 'sha256',
    sliding_window: 'None',
    swap_space: '4.0',
    swap_space_bytes: '4294967296.0',
  };
}

export function registerCacheConfigInfo(
  registry: Registry,
  kvBlocks: number,
  blockSize: number,
): void {
  const labels = cacheConfigLabels(kvBlocks, blockSize);
  new Gauge({
    name: 'vllm:cache_config_info',
    help: 'Information of the LLMEngine CacheConfig',
    labelNames: Object.keys(labels),
    registers: [registry],
  }).set(labels, 1);
}

/** Label sets of vllm:lora_requests_info kept (vLLM keeps all; the newest is what counts). */
export const LORA_INFO_SERIES_KEPT = 64;

/**
 * `vllm:lora_requests_info` (exported with LoRA on): after every engine step vLLM sets the
 * series labelled with the step's adapters to the current Unix time (set_to_current_time),
 * so a reader takes the series with the largest value; earlier label sets stay exported
 * with their older times. Labels:
 * - `max_lora`: --max-loras;
 * - `running_lora_adapters`, `waiting_lora_adapters`: the names, comma-joined, of the
 *   adapters with a request in flight (waiting or running), in the order they got one.
 *   Both are the same list: vLLM fills both from one per-adapter table (a running and a
 *   waiting count for every adapter that has a request) and exports only its keys.
 * No series exists before the first step.
 */
export class LoraRequestsInfo {
  /** Requests in flight per adapter, in the order adapters got their first one. */
  private readonly inFlight = new Map<string, number>();
  /** Unix seconds each label set was last set, least recent first. */
  private readonly series = new Map<string, { labels: Record<string, string>; value: number }>();

  constructor(
    registry: Registry,
    private readonly maxLoras: number,
    private readonly unixSeconds: () => number = () => Date.now() / 1000,
  ) {
    const series = this.series;
    new Gauge({
      name: 'vllm:lora_requests_info',
      help: 'Running stats on lora requests.',
      labelNames: ['max_lora', 'running_lora_adapters', 'waiting_lora_adapters'],
      registers: [registry],
      collect() {
        this.reset();
        for (const { labels, value } of series.values()) this.set(labels, value);
      },
    });
  }

  requestStarted(lora: string | undefined): void {
    if (lora === undefined) return;
    this.inFlight.set(lora, (this.inFlight.get(lora) ?? 0) + 1);
  }

  requestEnded(lora: string | undefined): void {
    if (lora === undefined) return;
    const left = (this.inFlight.get(lora) ?? 1) - 1;
    if (left > 0) this.inFlight.set(lora, left);
    else this.inFlight.delete(lora);
  }

  /** An engine step ended: the series of the adapters in flight now gets the time. */
  record(): void {
    const adapters = [...this.inFlight.keys()].join(',');
    const labels = {
      max_lora: String(this.maxLoras),
      running_lora_adapters: adapters,
      waiting_lora_adapters: adapters,
    };
    this.series.delete(adapters);
    this.series.set(adapters, { labels, value: this.unixSeconds() });
    for (const key of this.series.keys()) {
      if (this.series.size <= LORA_INFO_SERIES_KEPT) break;
      this.series.delete(key);
    }
  }
}
