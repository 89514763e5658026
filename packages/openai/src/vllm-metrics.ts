/**
 * vLLM's /metrics (Prometheus text exposition format 0.0.4) as the per-pod numbers
 * the gateway's leader uses: load gauges for admission and saturation, and the
 * cumulative latency histograms and token counters the capacity tuner turns
 * into per-period observations.
 *
 * A small strict parser rather than a dependency: the npm parsers for this format
 * are unmaintained (parse-prometheus-text-format: last release 2019) and the
 * subset vLLM emits is small. Strict: a malformed line throws (naming it), so a
 * pod serving something else than metrics is noticed instead of read as zeros.
 */

export interface PrometheusSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export class PrometheusParseError extends Error {
  constructor(
    readonly line: number,
    message: string,
  ) {
    super(`metrics line ${line}: ${message}`);
    this.name = 'PrometheusParseError';
  }
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;
const METRIC_TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(text: string, line: number): number {
  switch (text) {
    case '+Inf':
    case 'Inf':
      return Number.POSITIVE_INFINITY;
    case '-Inf':
      return Number.NEGATIVE_INFINITY;
    case 'NaN':
      return Number.NaN;
  }
  // Number('') is 0 and Number('0x10') is 16: only decimal floats are values.
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) {
    throw new PrometheusParseError(line, `bad value ${JSON.stringify(text)}`);
  }
  return Number(text);
}

function parseLabels(
  text: string,
  start: number,
  line: number,
): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = start;
  const skipSpaces = () => {
    while (text[i] === ' ' || text[i] === '\t') i++;
  };
  for (;;) {
    skipSpaces();
    if (text[i] === '}') return { labels, end: i + 1 };
    const name = LABEL_NAME.exec(text.slice(i))?.[0];
    if (!name) throw new PrometheusParseError(line, `bad label name at column ${i + 1}`);
    i += name.length;
    skipSpaces();
    if (text[i] !== '=') throw new PrometheusParseError(line, `expected = after label ${name}`);
    i++;
    skipSpaces();
    if (text[i] !== '"') throw new PrometheusParseError(line, `expected " for label ${name}`);
    i++;
    let value = '';
    for (;;) {
      const c = text[i];
      if (c === undefined) throw new PrometheusParseError(line, `unterminated label ${name}`);
      i++;
      if (c === '"') break;
      if (c === '\\') {
        const escaped = text[i++];
        if (escaped === 'n') value += '\n';
        else if (escaped === '\\' || escaped === '"') value += escaped;
        else throw new PrometheusParseError(line, `bad escape in label ${name}`);
      } else {
        value += c;
      }
    }
    if (Object.hasOwn(labels, name)) {
      throw new PrometheusParseError(line, `label ${name} repeated`);
    }
    labels[name] = value;
    skipSpaces();
    if (text[i] === ',') {
      i++;
      continue;
    }
    if (text[i] === '}') return { labels, end: i + 1 };
    throw new PrometheusParseError(line, `expected , or } after label ${name}`);
  }
}

/** Every sample of a text exposition, in order. Throws PrometheusParseError. */
export function parsePrometheusText(text: string): PrometheusSample[] {
  const samples: PrometheusSample[] = [];
  const lines = text.split('\n');
  for (let index = 0; index < lines.length; index++) {
    const lineNumber = index + 1;
    const raw = lines[index]!.replace(/\r$/, '');
    const line = raw.trimStart();
    if (line.length === 0) continue;
    if (line.startsWith('#')) {
      const parts = line
        .slice(1)
        .trim()
        .split(/[ \t]+/);
      if (parts[0] === 'HELP' || parts[0] === 'TYPE') {
        const name = parts[1] ?? '';
        if (METRIC_NAME.exec(name)?.[0] !== name) {
          throw new PrometheusParseError(lineNumber, `bad metric name in # ${parts[0]}`);
        }
        if (parts[0] === 'TYPE' && !METRIC_TYPES.has(parts[2] ?? '')) {
          throw new PrometheusParseError(lineNumber, `unknown metric type ${parts[2]}`);
        }
      }
      continue;
    }
    const name = METRIC_NAME.exec(line)?.[0];
    if (!name) throw new PrometheusParseError(lineNumber, 'expected a metric name');
    let i = name.length;
    let labels: Record<string, string> = {};
    if (line[i] === '{') {
      const parsed = parseLabels(line, i + 1, lineNumber);
      labels = parsed.labels;
      i = parsed.end;
    }
    const rest = line.slice(i);
    if (!/^[ \t]/.test(rest)) throw new PrometheusParseError(lineNumber, 'expected a value');
    const fields = rest.trim().split(/[ \t]+/);
    if (fields.length > 2) throw new PrometheusParseError(lineNumber, 'trailing fields');
    if (fields.length === 2 && !/^-?\d+$/.test(fields[1]!)) {
      throw new PrometheusParseError(lineNumber, `bad timestamp ${JSON.stringify(fields[1])}`);
    }
    samples.push({ name, labels, value: parseValue(fields[0]!, lineNumber) });
  }
  return samples;
}

export interface SumCount {
  sum: number;
  count: number;
  /** Cumulative counts by upper bound (le), ascending, +Inf last; when the pod exposes them. */
  buckets?: Array<[le: number, count: number]>;
}

/** One pod's vLLM numbers; null where the pod does not expose the metric. */
export interface VllmMetrics {
  /** model_name labels seen (a vLLM pod serves one model). */
  models: string[];
  waiting: number | null;
  running: number | null;
  /** 0..1 (vllm:kv_cache_usage_perc, or gpu_cache_usage_perc before vLLM 0.10). */
  kvCacheUsage: number | null;
  /** Seconds. */
  ttft: SumCount | null;
  /** Seconds between tokens: inter_token_latency, or time_per_output_token before 0.10. */
  itl: SumCount | null;
  promptTokens: number | null;
  generationTokens: number | null;
  /** Finished requests, every finished_reason summed. */
  requestSuccess: number | null;
  /** Per finished request: prompt and generated tokens. */
  requestPromptTokens: SumCount | null;
  requestGenerationTokens: SumCount | null;
  /** Seconds from arrival to first scheduling (vllm:request_queue_time_seconds). */
  queueTime: SumCount | null;
  /**
   * The pod's KV cache (vllm:cache_config_info: num_gpu_blocks blocks of block_size tokens),
   * null when the pod does not say (before the engine profiled its memory, or an older vLLM).
   */
  cache: { blocks: number; blockSize: number } | null;
  /**
   * vllm:lora_requests_info (with LoRA on): the pod's adapter slots (`max_lora`) and the
   * adapters with a request in flight (running or waiting), from the series set last (the
   * largest value: vLLM sets each step's series to the current time); null without it.
   */
  lora: { maxLora: number; adapters: string[] } | null;
}

export interface VllmMetricsOptions {
  /** Only samples with this model_name label (default: all, summed). */
  model?: string;
}

/**
 * The numbers of one pod's /metrics text, each summed over its label sets (the
 * model's, and e.g. every finished_reason). Throws PrometheusParseError.
 */
export function parseVllmMetrics(text: string, options: VllmMetricsOptions = {}): VllmMetrics {
  const totals = new Map<string, number>();
  /** Histogram buckets: name -> le -> count, summed over the other labels. */
  const buckets = new Map<string, Map<number, number>>();
  const models = new Set<string>();
  let cache: VllmMetrics['cache'] = null;
  let lora: VllmMetrics['lora'] = null;
  let loraSetAt = Number.NEGATIVE_INFINITY;
  for (const sample of parsePrometheusText(text)) {
    if (!sample.name.startsWith('vllm:')) continue;
    if (sample.name === 'vllm:cache_config_info') {
      // An info metric (value 1, no model_name): the numbers are labels.
      const blocks = Number(sample.labels.num_gpu_blocks);
      const blockSize = Number(sample.labels.block_size);
      if (Number.isInteger(blocks) && blocks > 0 && Number.isInteger(blockSize) && blockSize > 0) {
        cache = { blocks, blockSize };
      }
      continue;
    }
    if (sample.name === 'vllm:lora_requests_info') {
      const maxLora = Number(sample.labels.max_lora);
      if (Number.isInteger(maxLora) && maxLora >= 0 && sample.value > loraSetAt) {
        loraSetAt = sample.value;
        const names = (label: string | undefined) =>
          (label ?? '').split(',').filter((name) => name !== '');
        const adapters = new Set([
          ...names(sample.labels.running_lora_adapters),
          ...names(sample.labels.waiting_lora_adapters),
        ]);
        lora = { maxLora, adapters: [...adapters] };
      }
      continue;
    }
    const model = sample.labels.model_name;
    if (model !== undefined) models.add(model);
    if (options.model !== undefined && model !== options.model) continue;
    if (sample.name.endsWith('_bucket') && sample.labels.le !== undefined) {
      const le = sample.labels.le === '+Inf' ? Number.POSITIVE_INFINITY : Number(sample.labels.le);
      if (Number.isNaN(le)) continue;
      const byLe = buckets.get(sample.name) ?? new Map<number, number>();
      byLe.set(le, (byLe.get(le) ?? 0) + sample.value);
      buckets.set(sample.name, byLe);
      continue;
    }
    totals.set(sample.name, (totals.get(sample.name) ?? 0) + sample.value);
  }
  const value = (...names: string[]) => {
    for (const name of names) {
      const v = totals.get(name);
      if (v !== undefined) return v;
    }
    return null;
  };
  const histogram = (...names: string[]): SumCount | null => {
    for (const name of names) {
      const sum = totals.get(`${name}_sum`);
      const count = totals.get(`${name}_count`);
      if (sum === undefined || count === undefined) continue;
      const byLe = buckets.get(`${name}_bucket`);
      if (!byLe) return { sum, count };
      return { sum, count, buckets: [...byLe.entries()].sort((a, b) => a[0] - b[0]) };
    }
    return null;
  };
  return {
    models: [...models],
    waiting: value('vllm:num_requests_waiting'),
    running: value('vllm:num_requests_running'),
    kvCacheUsage: value('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'),
    ttft: histogram('vllm:time_to_first_token_seconds'),
    itl: histogram('vllm:inter_token_latency_seconds', 'vllm:time_per_output_token_seconds'),
    promptTokens: value('vllm:prompt_tokens_total'),
    generationTokens: value('vllm:generation_tokens_total'),
    requestSuccess: value('vllm:request_success_total'),
    requestPromptTokens: histogram('vllm:request_prompt_tokens'),
    requestGenerationTokens: histogram('vllm:request_generation_tokens'),
    queueTime: histogram('vllm:request_queue_time_seconds'),
    cache,
    lora,
  };
}
