import { describe, expect, it } from 'vitest';
import {
  PrometheusParseError,
  parsePrometheusText,
  parseVllmMetrics,
} from '../src/vllm-metrics.js';

/** Trimmed from a fairgate-sim /metrics (the vLLM V1 names). */
const SIM = `# HELP vllm:num_requests_running Requests in the running batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m1"} 3

# HELP vllm:num_requests_waiting Requests waiting to be scheduled.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m1"} 2

# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m1"} 0.125

# HELP vllm:time_to_first_token_seconds Time to first token.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="m1"} 0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m1"} 4
vllm:time_to_first_token_seconds_sum{model_name="m1"} 0.2
vllm:time_to_first_token_seconds_count{model_name="m1"} 4

# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_sum{model_name="m1"} 0.5
vllm:inter_token_latency_seconds_count{model_name="m1"} 50
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_sum{model_name="m1"} 99
vllm:time_per_output_token_seconds_count{model_name="m1"} 1

# TYPE vllm:request_generation_tokens histogram
vllm:request_generation_tokens_sum{model_name="m1"} 40
vllm:request_generation_tokens_count{model_name="m1"} 3
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_sum{model_name="m1"} 300
vllm:request_prompt_tokens_count{model_name="m1"} 3
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m1"} 400
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m1"} 54
# HELP vllm:request_success_total Finished requests by finish reason.
# TYPE vllm:request_success_total counter
vllm:request_success_total{model_name="m1",finished_reason="stop"} 1
vllm:request_success_total{model_name="m1",finished_reason="length"} 2
vllm:request_success_total{model_name="m1",finished_reason="abort"} 0

# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
`;

describe('parsePrometheusText', () => {
  it('reads names, labels, values and skips comments', () => {
    const samples = parsePrometheusText(
      [
        '# a comment',
        'plain 1',
        'with_labels{a="x",b="y"} -2.5e3 1700000000000',
        'trailing_comma{a="x",} +Inf',
        'spaces{ a = "x" , b="y" }  NaN',
        'colon:name{path="C:\\\\DIR\\\\F.TXT",msg="say \\"hi\\"\\nbye"} 7',
        'neg -Inf',
        '   ',
      ].join('\r\n'),
    );
    expect(samples.map((s) => s.name)).toEqual([
      'plain',
      'with_labels',
      'trailing_comma',
      'spaces',
      'colon:name',
      'neg',
    ]);
    expect(samples[1]).toEqual({ name: 'with_labels', labels: { a: 'x', b: 'y' }, value: -2500 });
    expect(samples[2]!.value).toBe(Number.POSITIVE_INFINITY);
    expect(samples[3]!.labels).toEqual({ a: 'x', b: 'y' });
    expect(samples[3]!.value).toBeNaN();
    expect(samples[4]!.labels).toEqual({ path: 'C:\\DIR\\F.TXT', msg: 'say "hi"\nbye' });
    expect(samples[5]!.value).toBe(Number.NEGATIVE_INFINITY);
  });

  it.each([
    ['no value', 'metric'],
    ['value glued to the labels', 'metric{a="b"}1'],
    ['bad value', 'metric abc'],
    ['hex value', 'metric 0x10'],
    ['empty value', 'metric{a="b"} '],
    ['bad label name', 'metric{1a="b"} 1'],
    ['unquoted label', 'metric{a=b} 1'],
    ['unterminated label', 'metric{a="b} 1'],
    ['bad escape', 'metric{a="\\t"} 1'],
    ['repeated label', 'metric{a="b",a="c"} 1'],
    ['missing comma', 'metric{a="b" c="d"} 1'],
    ['bad timestamp', 'metric 1 soon'],
    ['trailing fields', 'metric 1 2 3'],
    ['bad name', '{a="b"} 1'],
    ['bad TYPE', '# TYPE metric gaugey'],
    ['bad HELP name', '# HELP 1metric text'],
  ])('rejects %s, naming the line', (_name, line) => {
    const text = `ok 1\n${line}\n`;
    expect(() => parsePrometheusText(text)).toThrow(PrometheusParseError);
    expect(() => parsePrometheusText(text)).toThrow(/^metrics line 2: /);
  });
});

describe('parseVllmMetrics', () => {
  it('reads the tuner and load numbers, summing label sets', () => {
    expect(parseVllmMetrics(SIM)).toEqual({
      models: ['m1'],
      waiting: 2,
      running: 3,
      kvCacheUsage: 0.125,
      ttft: {
        sum: 0.2,
        count: 4,
        buckets: [
          [0.001, 0],
          [Number.POSITIVE_INFINITY, 4],
        ],
      },
      itl: { sum: 0.5, count: 50 },
      promptTokens: 400,
      generationTokens: 54,
      requestSuccess: 3,
      requestPromptTokens: { sum: 300, count: 3 },
      requestGenerationTokens: { sum: 40, count: 3 },
      queueTime: null,
      cache: null,
      lora: null,
    });
  });

  it('reads the adapters and slots of the newest vllm:lora_requests_info series', () => {
    const text = [
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters="a"} 1.7e9',
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="b,c",waiting_lora_adapters="c,d"} 1.8e9',
      'vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.6e9',
    ].join('\n');
    expect(parseVllmMetrics(text).lora).toEqual({ maxLora: 2, adapters: ['b', 'c', 'd'] });
  });

  it.each([
    {
      line: 'vllm:cache_config_info{block_size="16",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="1100"} 1.0',
      cache: { blocks: 1100, blockSize: 16 },
    },
    { line: 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0', cache: null },
    { line: 'vllm:cache_config_info{num_gpu_blocks="512"} 1.0', cache: null },
    { line: 'vllm:num_requests_running{model_name="m"} 1', cache: null },
  ])('reads the KV cache from vllm:cache_config_info: $line', ({ line, cache }) => {
    // An info metric has no model_name: read even when one model is asked for.
    expect(parseVllmMetrics(line, { model: 'm' }).cache).toEqual(cache);
  });

  it('accepts the names before vLLM 0.10 and reports what is missing as null', () => {
    const old = [
      'vllm:gpu_cache_usage_perc{model_name="m"} 0.5',
      'vllm:time_per_output_token_seconds_sum{model_name="m"} 1.5',
      'vllm:time_per_output_token_seconds_count{model_name="m"} 30',
    ].join('\n');
    const m = parseVllmMetrics(old);
    expect(m.kvCacheUsage).toBe(0.5);
    expect(m.itl).toEqual({ sum: 1.5, count: 30 });
    expect(m.ttft).toBeNull();
    expect(m.waiting).toBeNull();
    expect(m.requestSuccess).toBeNull();
  });

  it('sums several models, or keeps one', () => {
    const two = [
      'vllm:num_requests_running{model_name="a"} 1',
      'vllm:num_requests_running{model_name="b"} 4',
      'vllm:prompt_tokens_total{model_name="a"} 10',
      'vllm:prompt_tokens_total{model_name="b"} 20',
    ].join('\n');
    expect(parseVllmMetrics(two).running).toBe(5);
    expect(parseVllmMetrics(two).models).toEqual(['a', 'b']);
    expect(parseVllmMetrics(two, { model: 'b' }).promptTokens).toBe(20);
    expect(parseVllmMetrics(two, { model: 'c' }).running).toBeNull();
  });

  it('throws on a page that is not a metrics exposition', () => {
    expect(() => parseVllmMetrics('<html><body>502 Bad Gateway</body></html>')).toThrow(
      PrometheusParseError,
    );
  });
});
