import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import {
  cacheConfigLabels,
  LORA_INFO_SERIES_KEPT,
  LoraRequestsInfo,
  registerCacheConfigInfo,
} from '../src/info-metrics.js';
import { metricValues } from './http.js';

describe('vllm:cache_config_info', () => {
  it("has vLLM 0.11's CacheConfig labels plus engine, as strings, value 1", async () => {
    const registry = new Registry();
    registerCacheConfigInfo(registry, 9271, 16);
    const text = await registry.metrics();
    // A vLLM 0.11.0 pod's line (vllm-project/vllm#28924), with our blocks and vLLM defaults.
    expect(text).toContain(
      'vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",' +
        'cpu_kvcache_space_bytes="None",cpu_offload_gb="0.0",enable_prefix_caching="True",' +
        'engine="0",gpu_memory_utilization="0.9",is_attention_free="False",' +
        'kv_cache_memory_bytes="None",kv_sharing_fast_prefill="False",mamba_cache_dtype="auto",' +
        'mamba_page_size_padded="None",mamba_ssm_cache_dtype="auto",num_cpu_blocks="None",' +
        'num_gpu_blocks="9271",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",' +
        'sliding_window="None",swap_space="4.0",swap_space_bytes="4294967296.0"} 1\n',
    );
    expect(Object.keys(cacheConfigLabels(1, 1))).toEqual(
      Object.keys(cacheConfigLabels(1, 1)).sort(),
    );
  });
});

describe('vllm:lora_requests_info', () => {
  function info(maxLoras = 4) {
    const registry = new Registry();
    let clock = 1_000;
    const gauge = new LoraRequestsInfo(registry, maxLoras, () => clock++);
    const series = async () => metricValues(await registry.metrics(), 'vllm:lora_requests_info');
    return { gauge, series };
  }
  const key = (adapters: string, maxLora = 4) =>
    `{max_lora="${maxLora}",running_lora_adapters="${adapters}",waiting_lora_adapters="${adapters}"}`;

  it('lists adapters with requests in flight, in the order they got one; the time marks the newest', async () => {
    const { gauge, series } = info();
    expect((await series()).size).toBe(0);
    gauge.requestStarted('b');
    gauge.requestStarted('a');
    gauge.requestStarted('b');
    gauge.requestStarted(undefined); // the base model is no adapter
    gauge.record();
    gauge.requestEnded('b');
    gauge.record(); // b still has one request
    gauge.requestEnded('b');
    gauge.record();
    gauge.requestEnded('a');
    gauge.record();
    expect(await series()).toEqual(
      new Map([
        [key('b,a'), 1_001],
        [key('a'), 1_002],
        [key(''), 1_003],
      ]),
    );
  });

  it(`keeps the ${LORA_INFO_SERIES_KEPT} most recently set label sets`, async () => {
    const { gauge, series } = info(1);
    for (let index = 0; index <= LORA_INFO_SERIES_KEPT; index++) {
      gauge.requestStarted(`l${index}`);
      gauge.record();
      gauge.requestEnded(`l${index}`);
    }
    const kept = await series();
    expect(kept.size).toBe(LORA_INFO_SERIES_KEPT);
    expect(kept.has(key('l0', 1))).toBe(false);
    expect(kept.get(key(`l${LORA_INFO_SERIES_KEPT}`, 1))).toBe(1_000 + LORA_INFO_SERIES_KEPT);
  });
});
